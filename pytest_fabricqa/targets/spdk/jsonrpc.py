"""SPDK's JSON-RPC socket on the target host, reached over the host's transport: one ``python3`` one-shot per batch
of calls, no daemon of ours.

Where the host has SPDK's own ``rpc.py``, the calls go through the client it is built on (``spdk.rpc.client``, in
the ``python`` folder beside ``scripts/``, or installed); the plugin names methods and passes their parameters as
JSON, so it does not depend on rpc.py's per-method command-line flags, which change between releases. Without
rpc.py, :data:`CLIENT_SCRIPT` speaks JSON-RPC 2.0 on the UNIX socket itself. Either way the host prints the raw
responses as one JSON document, parsed here.

Every script is fixed text; the socket, the method names and their parameters travel as arguments (``python3 -c
SCRIPT ARG...``), never as code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.transport.base import CommandResult, Host

# argv: mode ("own" or "spdk:<python dir or empty>"), socket, timeout s, connect wait s, pid to watch ("" for none),
# calls as JSON [[method, params or null], ...]. Prints {"responses": [...]} (stopping after the first error
# response) or {"fabricqa": what, "message": ..., "responses": [...]} with exit code 3 when the socket could not be
# reached or the connection broke. A call SPDK answers "subsystem busy, retry later." (23.01 does while a subsystem
# pauses for a change just made: tests/data/spdk/rpc-busy.json) is sent again, for up to 5 s.
CLIENT_SCRIPT = r"""
import json, os, socket, sys, time
mode, path, timeout, wait, pid, calls = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])
responses = []
def out(obj, code=0):
    obj["responses"] = responses
    sys.stdout.write(json.dumps(obj))
    sys.stdout.flush()
    sys.exit(code)
deadline = time.monotonic() + wait
def retry(what):
    if pid and not os.path.exists("/proc/%s" % pid):
        out({"fabricqa": "exited", "message": "process %s exited" % pid}, 3)
    if time.monotonic() >= deadline:
        out({"fabricqa": "connect", "message": what}, 3)
    time.sleep(0.2)
if mode.startswith("spdk:"):
    if mode[5:]:
        sys.path.insert(0, mode[5:])
    try:
        from spdk.rpc.client import JSONRPCClient, JSONRPCException
    except ImportError as exc:
        out({"fabricqa": "client", "message": "cannot import SPDK's rpc client (spdk.rpc.client) from %s: %s" % (mode[5:] or "sys.path", exc)}, 3)
    while True:
        try:
            client = JSONRPCClient(path, timeout=timeout)
            break
        except JSONRPCException as exc:
            retry(exc.message.strip().splitlines()[-1])
    def call(method, params):
        client.send(method, params)
        return client.recv()
else:
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        try:
            conn.connect(path)
            break
        except OSError as exc:
            conn.close()
            retry("cannot connect to %s: %s" % (path, exc.strerror or exc))
    pending = [b""]
    decoder = json.JSONDecoder()
    def call(method, params):
        request = {"jsonrpc": "2.0", "method": method, "id": len(responses) + 1}
        if params is not None:
            request["params"] = params
        conn.sendall(json.dumps(request).encode())
        while True:
            text = pending[0].decode("utf-8", "replace").lstrip()
            if text:
                try:
                    obj, end = decoder.raw_decode(text)
                    pending[0] = text[end:].encode()
                    return obj
                except ValueError:
                    pass
            data = conn.recv(65536)
            if not data:
                raise ConnectionError("the SPDK app closed the connection")
            pending[0] += data
for method, params in calls:
    for attempt in range(50):
        try:
            response = call(method, params)
        except Exception as exc:
            out({"fabricqa": "transport", "message": "%s: %s" % (method, getattr(exc, "message", None) or exc)}, 3)
        if "retry later" not in str(response.get("error", {}).get("message", "")):
            break
        time.sleep(0.1)
    responses.append(response)
    if "error" in response:
        break
out({})
"""

CLIENT_EXIT = 3


class SpdkRpcError(ProvisionError):
    """An SPDK JSON-RPC call failed: one line naming the method, its parameters and SPDK's own message."""

    def __init__(self, host: str, method: str, params: Mapping[str, Any] | None, code: int, message: str, fix: str):
        self.method = method
        self.params = dict(params or {})
        self.code = code
        self.message = message
        shown = json.dumps(self.params, sort_keys=True)
        super().__init__(host, f"SPDK RPC {method} {shown} failed: {one_line(message)} (code {code})", fix)


class SpdkUnreachable(ProvisionError):
    """No SPDK app answered on the RPC socket (or the client could not run); ``reason`` says which."""

    def __init__(self, host: str, socket: str, reason: str, message: str, fix: str) -> None:
        self.socket = socket
        self.reason = reason
        super().__init__(host, f"no SPDK app answers on {socket} ({one_line(message)})", fix)


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined with " / "."""
    return " / ".join(line.strip() for line in str(text).splitlines() if line.strip()) or "no message"


@dataclass(frozen=True)
class RpcClient:
    """How to reach one SPDK app: the host, its socket and which client runs there (``own`` or ``spdk:<dir>``)."""

    host: Host
    socket: str
    mode: str = "own"
    timeout: float = 60.0

    @property
    def kind(self) -> str:
        """What the calls go through, for messages: SPDK's rpc client or the plugin's own."""
        return "SPDK's rpc.py client" if self.mode.startswith("spdk:") else "fabricqa's JSON-RPC client"

    def batch(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | None]], *, wait: float = 0.0, pid: int | None = None
    ) -> list[dict[str, Any]]:
        """Run ``calls`` in order over one connection (one round trip); their responses, up to the first error.

        ``wait`` seconds are spent retrying the connection (while ``pid``, if given, is alive): for an app that
        is starting. Raises :class:`SpdkUnreachable` when nothing answers.
        """
        result = self.host.run(self.argv(calls, wait=wait, pid=pid), check=False, timeout=self.timeout + wait + 30)
        return self.responses(result)

    def argv(
        self, calls: Sequence[tuple[str, Mapping[str, Any] | None]], *, wait: float = 0.0, pid: int | None = None
    ) -> list[str]:
        """The command :meth:`batch` runs on the host, for a caller that wraps it (a fault times it with the
        host's clock in the same command); read its output with :meth:`responses`."""
        payload = json.dumps([[method, dict(params) if params is not None else None] for method, params in calls])
        return [
            "python3",
            "-c",
            CLIENT_SCRIPT,
            self.mode,
            self.socket,
            str(self.timeout),
            str(wait),
            str(pid or ""),
            payload,
        ]

    def responses(self, result: CommandResult) -> list[dict[str, Any]]:
        """The responses in the output of :meth:`argv`'s command; :class:`SpdkUnreachable` when nothing answered."""
        if result.exit_code == 127 or (
            result.exit_code and "python3" in result.stderr and "not found" in result.stderr
        ):
            raise SpdkUnreachable(
                self.host.name,
                self.socket,
                "python3",
                "python3 is missing",
                "install python3 on the target host (SPDK's rpc.py and fabricqa's JSON-RPC client run on it)",
            )
        try:
            data = json.loads(result.stdout)
        except ValueError:
            raise SpdkUnreachable(
                self.host.name,
                self.socket,
                "client",
                f"the RPC client failed with exit code {result.exit_code}: {(result.stderr or result.stdout)[-300:]}",
                "check python3 and the SPDK installation on the target host",
            ) from None
        if not isinstance(data, dict):
            raise SpdkUnreachable(self.host.name, self.socket, "client", "unexpected client output", "")
        if result.exit_code == CLIENT_EXIT or "fabricqa" in data:
            reason = str(data.get("fabricqa", "client"))
            fix = {
                "connect": "start nvmf_tgt, or check targets[].spdk.rpc_socket",
                "exited": "see the nvmf_tgt log on the target host",
                "client": "check targets[].spdk.rpc_py (SPDK's scripts/rpc.py) or drop it to use fabricqa's client",
            }.get(reason, "check the SPDK app on the target host")
            raise SpdkUnreachable(self.host.name, self.socket, reason, str(data.get("message", "")), fix)
        responses = data.get("responses")
        return list(responses) if isinstance(responses, list) else []

    def call(self, method: str, params: Mapping[str, Any] | None = None, fix: str = "") -> Any:
        """One call's result; an error response raises :class:`SpdkRpcError` naming the method and parameters."""
        response = self.batch([(method, params)])[0]
        return result_of(self.host.name, method, params, response, fix)

    def try_call(self, method: str, params: Mapping[str, Any] | None = None) -> tuple[Any, SpdkRpcError | None]:
        """One call: (result, None), or (None, the error) when SPDK answered with an error."""
        response = self.batch([(method, params)])[0]
        try:
            return result_of(self.host.name, method, params, response, ""), None
        except SpdkRpcError as exc:
            return None, exc


def result_of(host: str, method: str, params: Mapping[str, Any] | None, response: Mapping[str, Any], fix: str) -> Any:
    """A JSON-RPC response's result, or :class:`SpdkRpcError` for its error object."""
    error = response.get("error")
    if error is not None:
        code = int(error.get("code", 0)) if isinstance(error, dict) else 0
        message = str(error.get("message", error)) if isinstance(error, dict) else str(error)
        raise SpdkRpcError(host, method, params, code, message, fix or "see the nvmf_tgt log on the target host")
    return response.get("result")

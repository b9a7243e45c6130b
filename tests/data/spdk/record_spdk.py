"""Record real SPDK nvmf_tgt JSON-RPC exchanges on the build host (TCP on 127.0.0.1 only, no hugepages).

    python3 tests/data/spdk/record_spdk.py PATH/TO/nvmf_tgt PATH/TO/spdk/scripts/rpc.py OUT_DIR

Writes rpc_transcript.json (rpc.py's argv, exit code, stdout, stderr per call), jsonrpc_raw.json (raw JSON-RPC
requests and responses on the socket) and nvmf_tgt.log; see README.md beside it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NVMF_TGT, RPC_PY, OUT = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
SOCK = "/tmp/fabricqa-spdk-record.sock"
IMG = Path("/tmp/fabricqa-spdk-record.img")
NQN = "nqn.2026-11.io.fabricqa:spdk-rec"
OUT.mkdir(parents=True, exist_ok=True)
IMG.write_bytes(b"\0" * (64 << 20))
argv = [str(NVMF_TGT), "-m", "0x1", "-s", "512", "-u", "--env-context=--no-huge --legacy-mem", "-r", SOCK]
log = open(OUT / "nvmf_tgt.log", "w")  # noqa: SIM115 - nvmf_tgt writes to it until the end
log.write("$ " + " ".join(argv) + "\n")
log.flush()
proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
t0 = time.monotonic()
while not os.path.exists(SOCK):
    if proc.poll() is not None or time.monotonic() - t0 > 120:
        sys.exit(f"nvmf_tgt did not start: see {OUT / 'nvmf_tgt.log'}")
    time.sleep(0.2)
started = round(time.monotonic() - t0, 2)

transcript: list[dict[str, object]] = []


def rpc(*args: str) -> dict:
    cmd = [sys.executable, str(RPC_PY), "-s", SOCK, *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    entry = {"argv": ["rpc.py", "-s", SOCK, *args], "exit_code": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
    transcript.append(entry)
    return entry


raw: list[dict[str, object]] = []


def raw_call(method: str, params: dict | None = None) -> dict:
    req = {"jsonrpc": "2.0", "method": method, "id": len(raw) + 1}
    if params is not None:
        req["params"] = params
    s = socket.socket(socket.AF_UNIX)
    s.connect(SOCK)
    s.sendall(json.dumps(req).encode())
    buf = b""
    while True:
        buf += s.recv(65536)
        try:
            resp = json.loads(buf)
            break
        except ValueError:
            continue
    s.close()
    raw.append({"request": req, "response": resp})
    return resp


rpc("spdk_get_version")
rpc("nvmf_create_transport", "-t", "TCP")
rpc("nvmf_create_transport", "-t", "RDMA")
rpc("nvmf_get_transports")
rpc("bdev_aio_create", str(IMG), "aio0", "512")
rpc("bdev_get_bdevs")
rpc("bdev_get_bdevs", "-b", "aio0")
rpc("nvmf_create_subsystem", NQN, "-a", "-s", "FABRICQA0001", "-d", "fabricqa-recorded")
rpc("nvmf_subsystem_add_ns", NQN, "aio0")
rpc("nvmf_subsystem_add_listener", NQN, "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-f", "ipv4")
rpc("nvmf_get_subsystems")
# Error replies: a duplicate subsystem, an unknown bdev, an unknown subsystem, a missing file.
rpc("nvmf_create_subsystem", NQN, "-a")
rpc("nvmf_subsystem_add_ns", NQN, "no-such-bdev")
rpc("nvmf_subsystem_add_listener", "nqn.2026-11.io.fabricqa:nope", "-t", "tcp", "-a", "127.0.0.1", "-s", "4421")
rpc("bdev_aio_create", "/tmp/fabricqa-no-such-file", "aio1", "512")
rpc("bdev_aio_delete", "no-such-bdev")
rpc("nvmf_delete_subsystem", "nqn.2026-11.io.fabricqa:nope")
# The same through raw JSON-RPC (what a client without rpc.py sends and receives).
raw_call("spdk_get_version")
raw_call("nvmf_get_subsystems")
raw_call("nvmf_create_subsystem", {"nqn": NQN, "allow_any_host": True})
raw_call("bdev_get_bdevs", {"name": "aio0"})
raw_call("nvmf_subsystem_add_host", {"nqn": NQN, "host": "nqn.2014-08.org.nvmexpress:uuid:0000"})
HOSTS_NQN = "nqn.2026-11.io.fabricqa:spdk-hosts"
HOST = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0042-3010-8052-b4c04f4e3432"
raw_call(
    "nvmf_create_subsystem",
    {"nqn": HOSTS_NQN, "serial_number": "FABRICQA0002", "model_number": "fabricqa", "allow_any_host": False},
)
raw_call("nvmf_subsystem_add_host", {"nqn": HOSTS_NQN, "host": HOST})
raw_call("nvmf_get_subsystems")
raw_call("nvmf_subsystem_remove_host", {"nqn": HOSTS_NQN, "host": HOST})
raw_call("nvmf_delete_subsystem", {"nqn": HOSTS_NQN})
raw_call("no_such_method")
raw_call("framework_get_reactors")
raw_call("nvmf_get_stats")
# Teardown, in reverse.
rpc("nvmf_subsystem_remove_listener", NQN, "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-f", "ipv4")
rpc("nvmf_subsystem_remove_ns", NQN, "1")
rpc("nvmf_delete_subsystem", NQN)
rpc("bdev_aio_delete", "aio0")
rpc("nvmf_get_subsystems")
rpc("bdev_get_bdevs")

proc.send_signal(signal.SIGINT)
code = proc.wait(timeout=60)
log.close()
IMG.unlink()
(OUT / "rpc_transcript.json").write_text(json.dumps(transcript, indent=2) + "\n")
(OUT / "jsonrpc_raw.json").write_text(json.dumps(raw, indent=2) + "\n")
print(f"nvmf_tgt up in {started} s, exited {code} on SIGINT; {len(transcript)} rpc.py calls, {len(raw)} raw")

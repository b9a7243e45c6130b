"""Record real JSON-RPC replies of SPDK's nvmf_tgt for the unit tests (see README.md in this folder).

    python3 tests/data/spdk/record.py SOCKET BACKING_FILE PORT > tests/data/spdk/rpc-session.json

Talks to an nvmf_tgt already running on SOCKET (started as the README says) with nothing but the standard library,
sends the calls the plugin makes -- and the mistakes it must report -- in order, and prints every exchange as
{"method", "params", "response"}. It leaves the app as it found it (it deletes what it made).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

NQN = "nqn.2026-11.io.fabricqa:vlab-ram0"
NQN2 = "nqn.2026-11.io.fabricqa:vlab-nvme0"
HOST = "nqn.2026-11.io.fabricqa:vnode1"
SERIAL = "FQA0123456789ABCDEF"
MODEL = "fabricqa"


def main(path: str, backing: str, port: str) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    decoder = json.JSONDecoder()
    buffer = ""
    exchanges: list[dict[str, Any]] = []

    def call(method: str, params: dict[str, Any] | None = None) -> None:
        nonlocal buffer
        request: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": len(exchanges) + 1}
        if params is not None:
            request["params"] = params
        conn.sendall(json.dumps(request).encode())
        while True:
            text = buffer.lstrip()
            if text:
                try:
                    response, end = decoder.raw_decode(text)
                    buffer = text[end:]
                    break
                except ValueError:
                    pass
            buffer += conn.recv(65536).decode()
        exchanges.append({"method": method, "params": params, "response": response})

    listen = {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port}
    call("spdk_get_version")
    call("framework_wait_init")
    call("nvmf_get_transports")
    call("nvmf_create_transport", {"trtype": "TCP"})
    call("nvmf_create_transport", {"trtype": "TCP"})  # again: already there
    call("nvmf_create_transport", {"trtype": "RDMA"})  # no RDMA device on the recording machine
    call("nvmf_get_transports")
    call("bdev_aio_create", {"name": "fabricqa_ram0", "filename": backing})  # a file: no block size to detect
    call("bdev_aio_create", {"name": "fabricqa_ram0", "filename": backing, "block_size": 512})
    call("bdev_aio_create", {"name": "fabricqa_ram0", "filename": backing, "block_size": 512})  # the name is taken
    call("bdev_aio_create", {"name": "fabricqa_missing", "filename": backing + ".missing", "block_size": 512})
    call("bdev_aio_create", {"name": "foreign_disk", "filename": backing + "2", "block_size": 512})
    call("nvmf_create_subsystem", {"nqn": NQN, "serial_number": SERIAL, "model_number": MODEL, "allow_any_host": True})
    call(
        "nvmf_create_subsystem", {"nqn": NQN, "serial_number": SERIAL, "model_number": MODEL, "allow_any_host": True}
    )  # again: exists
    call("nvmf_create_subsystem", {"nqn": "nvmet1", "serial_number": SERIAL, "model_number": MODEL})  # short name
    call("nvmf_subsystem_add_ns", {"nqn": NQN, "namespace": {"nsid": 1, "bdev_name": "fabricqa_ram0"}})
    call("nvmf_subsystem_add_ns", {"nqn": NQN, "namespace": {"nsid": 2, "bdev_name": "no_such_bdev"}})
    call("nvmf_subsystem_add_listener", {"nqn": NQN, "listen_address": listen})
    call(
        "nvmf_create_subsystem",
        {"nqn": NQN2, "serial_number": SERIAL, "model_number": MODEL, "allow_any_host": False},
    )
    call("nvmf_subsystem_add_host", {"nqn": NQN2, "host": HOST})
    call(
        "nvmf_subsystem_add_ns",
        {
            "nqn": NQN2,
            "namespace": {"nsid": 1, "bdev_name": "foreign_disk", "nguid": "EF90689C6C46D44C89C14067801309A8"},
        },
    )
    call("nvmf_subsystem_add_listener", {"nqn": NQN2, "listen_address": listen})
    call(
        "nvmf_subsystem_add_listener",
        {"nqn": NQN2, "listen_address": {**listen, "traddr": "192.0.2.1"}},
    )  # an address the host does not have
    call("nvmf_get_subsystems")
    call("bdev_get_bdevs")
    call("nvmf_delete_subsystem", {"nqn": NQN})
    call("nvmf_delete_subsystem", {"nqn": NQN})  # again: gone
    call("nvmf_delete_subsystem", {"nqn": NQN2})
    call("bdev_aio_delete", {"name": "fabricqa_ram0"})
    call("bdev_aio_delete", {"name": "fabricqa_ram0"})  # again: gone
    call("bdev_aio_delete", {"name": "foreign_disk"})
    call("nvmf_get_subsystems")
    call("no_such_method")
    json.dump(exchanges, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])

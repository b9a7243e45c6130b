"""Small remote file-system steps the kernel targets share: configfs writes and the ownership state file.

Every script here is fixed text; lab values travel only as positional arguments (``sh -c SCRIPT sh ARG...``),
so an NQN, IQN or path never becomes shell syntax.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_fabricqa.transport.base import CommandError, Host

STATE_DIR = "/run/fabricqa"

_WRITE = 'printf %s "$1" > "$2"'
_RMDIR_IF = '[ ! -d "$1" ] || rmdir "$1"'
_UNLINK_IF = '[ ! -L "$1" ] || rm -f "$1"'
_LINK = 'ln -s "$1" "$2"'
# Written to a temporary name and renamed: a run killed mid-write never leaves a torn state file.
_WRITE_STATE = 'mkdir -p "$(dirname "$2")" && printf %s "$1" > "$2.tmp" && mv -f "$2.tmp" "$2"'
_READ_IF = '[ ! -e "$1" ] || cat "$1"'


def write(host: Host, path: str, value: str) -> None:
    """Write ``value`` into the configfs attribute ``path``."""
    host.run(["sh", "-c", _WRITE, "sh", value, path])


SECRET_WRITE = 'cat > "$1"'
"""argv: the attribute. The value comes on stdin, so a secret is never in a command line: not in the host's process
list, not in a failed command's message (which names the command and its arguments)."""


def write_secret(host: Host, path: str, value: str) -> None:
    """Write a secret into the configfs attribute ``path`` through stdin (:data:`SECRET_WRITE`)."""
    host.run(["sh", "-c", SECRET_WRITE, "sh", path], stdin=value)


def mkdir(host: Host, path: str) -> None:
    """Create one configfs object (a directory)."""
    host.run(["mkdir", path])


def create_dir(host: Host, path: str) -> bool:
    """Create one configfs object; False (and nothing created) when it already exists.

    ``mkdir`` is atomic: of two sessions creating the same object, exactly one gets True. The other must neither
    use nor remove the object, which is why "already exists" is an answer here rather than an error.
    """
    result = host.run(["mkdir", path], check=False)
    if result.ok:
        return True
    if "File exists" in result.stderr:
        return False
    raise CommandError(result)


def rmdir_if(host: Host, path: str) -> None:
    """Remove a configfs directory if it is there (idempotent)."""
    host.run(["sh", "-c", _RMDIR_IF, "sh", path])


def link(host: Host, source: str, link_path: str) -> None:
    """Create a configfs symlink ``link_path`` -> ``source``."""
    host.run(["sh", "-c", _LINK, "sh", source, link_path])


def unlink_if(host: Host, path: str) -> None:
    """Remove a configfs symlink if it is there (idempotent)."""
    host.run(["sh", "-c", _UNLINK_IF, "sh", path])


def state_path(prefix: str, kind: str) -> str:
    """Where the state file of a target kind lives on its host, e.g. /run/fabricqa/fabricqa-nvmet.json.

    /run is a tmpfs: the state file lives exactly as long as the configfs objects it describes.
    """
    return f"{STATE_DIR}/{prefix}-{kind}.json"


def read_state(host: Host, path: str) -> dict[str, Any] | None:
    """The state file's content, or None when there is none (a torn or foreign file reads as empty state)."""
    text = host.run(["sh", "-c", _READ_IF, "sh", path]).stdout
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def write_state(host: Host, path: str, data: dict[str, Any]) -> None:
    """Replace the state file atomically."""
    host.run(["sh", "-c", _WRITE_STATE, "sh", json.dumps(data, sort_keys=True), path])


def remove_state(host: Host, path: str) -> None:
    """Delete the state file (idempotent)."""
    host.run(["rm", "-f", path])


# Every record file of the state folder, one "path<TAB>content" line each (records are one-line JSON).
_LIST_RECORDS = 'for f in "$1"/*.json; do [ -f "$f" ] && printf "%s\\t%s\\n" "$f" "$(head -c 65536 "$f")"; done; true'


def records(host: Host) -> list[tuple[str, dict[str, Any]]]:
    """Every record file of ``host``'s state folder that holds a JSON object: (path, content), by path. A torn or
    foreign file is not a record and is left out."""
    out = host.run(["sh", "-c", _LIST_RECORDS, "sh", STATE_DIR], check=False).stdout
    found = []
    for line in out.splitlines():
        path, _, text = line.partition("\t")
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            found.append((path, data))
    return sorted(found, key=lambda item: item[0])


def other_labs_records(host: Host, lab_name: str) -> list[tuple[str, str]]:
    """The record files on ``host`` that name another lab than ``lab_name``: (path, that lab), sorted."""
    return [
        (path, other) for path, data in records(host) if isinstance(other := data.get("lab"), str) and other != lab_name
    ]


def is_block_device(host: Host, path: str) -> bool:
    """True when ``path`` is a block device on ``host``."""
    return host.run(["test", "-b", path], check=False).ok


def listening_processes(host: Host, port: int) -> list[str]:
    """Processes (not kernel sockets) listening on TCP ``port``: ``ss`` lines carrying ``users:``."""
    result = host.run(["ss", "-Hltnp", "sport", "=", f":{port}"], check=False)
    return [line.strip() for line in result.stdout.splitlines() if "users:" in line]

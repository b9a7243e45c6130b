"""dm-multipath on an initiator: the map multipathd made of a LUN's paths, and what the plugin undoes of it.

An iSCSI or iSER LUN reached over several portals is one SCSI disk per session (``sdb``, ``sdc``: one per path);
multipathd (Debian's ``multipath-tools``) groups the disks that show the same WWID into one device-mapper map,
``/dev/mapper/<name>`` (the WWID, or ``mpathN`` with ``user_friendly_names``), which sends the I/O down a live
path and queues or fails it when none is left (``no_path_retry``). The plugin makes no map itself: it waits for
the one multipathd made of exactly the disks of the LUN (their holder with a ``mpath-`` device-mapper UUID) and
uses that. multipathd also remembers each WWID it mapped in ``/etc/multipath/wwids`` (and then maps it even over
one path): the plugin forgets at teardown the WWIDs that were not there before its login, so the host's file is
left as it was found.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_fabricqa.lab.model import DmConf
from pytest_fabricqa.transport.base import CommandError, Host
from pytest_fabricqa.transport.fanout import each

WWIDS_FILE = "/etc/multipath/wwids"
CONF_DIR = "/etc/multipath/conf.d"
"""multipath-tools' ``config_dir``: every ``*.conf`` there is read after multipath.conf."""

# Fixed text. $1: the file, $2: its text, $3: the mark its first line must carry if it exists already (a file
# without it is someone else's: exit 3, nothing written). Then multipathd reads its configuration again.
WRITE_CONF = r"""
if [ -e "$1" ] && ! head -n 1 "$1" | grep -qF -- "$3"; then exit 3; fi
mkdir -p "${1%/*}" && printf '%s' "$2" > "$1" && multipathd reconfigure >/dev/null
"""
# $1: the file, $2: the mark. Removed only when it carries the mark; multipathd then reads its configuration again.
REMOVE_CONF = r"""
[ -e "$1" ] || exit 0
head -n 1 "$1" | grep -qF -- "$2" || exit 0
rm -f "$1" && { multipathd reconfigure >/dev/null 2>&1 || true; }
"""

# Fixed text: for each disk name argument (sdb), every multipath map holding it: disk, dm node, map name.
HOLDERS_SCRIPT = r"""
for d in "$@"; do
  for h in /sys/block/"$d"/holders/*; do
    [ -e "$h/dm/uuid" ] || continue
    case $(cat "$h/dm/uuid") in mpath-*) printf '%s\t%s\t%s\n' "$d" "${h##*/}" "$(cat "$h/dm/name")" ;; esac
  done
done
exit 0
"""


@dataclass(frozen=True)
class Map:
    """A multipath map: its device-mapper node (``dm-3``), its name and the disks it holds."""

    node: str
    name: str
    disks: tuple[str, ...]

    @property
    def path(self) -> str:
        """The map's device as users name it."""
        return f"/dev/mapper/{self.name}"


def parse_holders(text: str) -> dict[str, tuple[str, str]]:
    """:data:`HOLDERS_SCRIPT` output -> disk -> (dm node, map name)."""
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and all(parts):
            found[parts[0]] = (parts[1], parts[2])
    return found


def map_of(holders: dict[str, tuple[str, str]], disks: Sequence[str]) -> Map | None:
    """The one map holding every disk of ``disks``; None while any disk is unheld or they are held apart."""
    held = {holders.get(d) for d in disks}
    if len(held) != 1 or None in held:
        return None
    node, name = next(iter(held))  # type: ignore[misc]
    return Map(node, name, tuple(disks))


def holders(host: Host, disks: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Disk -> (dm node, map name) of every multipath map holding one of ``disks`` on ``host``."""
    return parse_holders(host.run(["sh", "-c", HOLDERS_SCRIPT, "sh", *disks]).stdout)


def wait_for_map(host: Host, disks: Sequence[str], timeout_s: float) -> Map | None:
    """Poll until one multipath map holds every disk of ``disks`` (multipathd makes it on their uevents)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = map_of(holders(host, disks), disks)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def parse_wwids_file(text: str) -> set[str]:
    """``/etc/multipath/wwids`` (lines ``/WWID/``, comments) -> the WWIDs it remembers."""
    return {line.strip().strip("/") for line in text.splitlines() if line.strip().startswith("/")}


def remembered(host: Host) -> set[str]:
    """The WWIDs multipath remembers on ``host`` (none when it has no such file)."""
    return parse_wwids_file(host.run(["sh", "-c", f"cat {WWIDS_FILE} 2>/dev/null || true"]).stdout)


def map_wwid(host: Host, node: str) -> str:
    """The WWID a map was made for (its device-mapper UUID without ``mpath-``)."""
    return host.run(["cat", f"/sys/block/{node}/dm/uuid"]).stdout.strip().removeprefix("mpath-")


FLUSH_TRIES = 10
"""How often :func:`flush` tries a map that is in use, 1 s apart: udev's probe of a map after a writer closed it
(the disk rules' inotify watch) holds it open for a moment, and a logout right after a write met it (CI,
2026-12-03: ``multipath -f`` said "map in use" and the iSCSI pair's later cases found no device)."""


def flush(host: Host, name: str, *, tries: int | None = None, pause_s: float = 1.0) -> None:
    """Remove the map ``name`` (its paths stay); gone already is not an error.

    udev settles first. A map in use is tried again, ``tries`` times in all (default :data:`FLUSH_TRIES`),
    ``pause_s`` apart; still in use after that (someone really holds it open) raises :class:`CommandError` with
    multipath's answer, as any other failure does at once.
    """
    if not host.run(["dmsetup", "info", name], check=False).ok:
        return
    host.run(["udevadm", "settle", "--timeout=10"], check=False, timeout=30)
    tries = FLUSH_TRIES if tries is None else tries
    for attempt in range(1, tries + 1):
        result = host.run(["multipath", "-f", name], check=False, timeout=120)
        if result.ok:
            return
        if "map in use" not in result.stdout + result.stderr:
            raise CommandError(result)
        if attempt == tries:
            raise CommandError(result, f"still in use after {tries} tries {pause_s:g} s apart")
        time.sleep(pause_s)


def forget(host: Host, wwid: str) -> None:
    """Take ``wwid`` out of multipath's remembered WWIDs (nothing to do when it is not there)."""
    if wwid in remembered(host):
        host.run(["multipath", "-w", wwid], timeout=60)


# -- what the connectivity suite checks of the maps ---------------------------------------------------------------

# Fixed text: whether multipathd answers, then each map named in "$@" as device-mapper holds it (table, status).
MAPS_SCRIPT = r"""
printf 'daemon\t%s\n' "$(multipathd show daemon 2>/dev/null | head -n 1)"
for m in "$@"; do
  printf 'map\t%s\t%s\t%s\n' "$m" "$(dmsetup table "$m" 2>/dev/null)" "$(dmsetup status "$m" 2>/dev/null)"
done
exit 0
"""


@dataclass(frozen=True)
class MapState:
    """One multipath map as device-mapper holds it."""

    name: str
    features: tuple[str, ...]
    """The table's features (``queue_if_no_path`` while multipath queues I/O with no path left)."""
    paths: tuple[str, ...]
    """Every path (major:minor) in the table."""
    active: tuple[str, ...]
    """The paths the status shows active (``A``)."""


def parse_table(table: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A ``multipath`` target's table line -> (features, paths). Layout (the kernel's dm-mpath): start, length,
    ``multipath``, #features, features, #handler args, handler args, #groups, first group, then per group its
    selector, #selector args, selector args, #paths, #path args, and per path its device and path args."""
    words = table.split()
    if len(words) < 3 or words[2] != "multipath":
        return (), ()
    at = 3

    def take(n: int) -> list[str]:
        nonlocal at
        out = words[at : at + n]
        at += n
        return out

    def count() -> int:
        (word,) = take(1)
        return int(word)

    features = tuple(take(count()))
    take(count())  # hardware handler
    groups = count()
    take(1)  # the first group to use
    paths: list[str] = []
    for _ in range(groups):
        take(1)  # selector
        take(count())
        npaths, nargs = count(), count()
        for _ in range(npaths):
            (device,) = take(1)
            paths.append(device)
            take(nargs)
    return features, tuple(paths)


def parse_maps(text: str) -> tuple[str, dict[str, MapState]]:
    """:data:`MAPS_SCRIPT` output -> (multipathd's answer, empty when it does not run; map name -> state)."""
    daemon, maps = "", {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "daemon":
            daemon = parts[1].strip() if len(parts) > 1 else ""
        elif parts[0] == "map" and len(parts) >= 4:
            try:
                features, paths = parse_table(parts[2])
            except (ValueError, IndexError):
                features, paths = (), ()
            status = parts[3].split()
            active = tuple(w for i, w in enumerate(status[:-1]) if w in paths and status[i + 1] == "A")
            maps[parts[1]] = MapState(parts[1], features, paths, active)
    return daemon, maps


def read_maps(host: Host, names: Iterable[str]) -> tuple[str, dict[str, MapState]]:
    """multipathd's answer and the state of the maps ``names`` on ``host``, in one command."""
    return parse_maps(host.run(["sh", "-c", MAPS_SCRIPT, "sh", *names]).stdout)


def map_problems(
    host: str, daemon: str, maps: dict[str, MapState], names: Iterable[str], paths: int, queue: bool | None
) -> list[str]:
    """Whether multipathd runs on ``host`` and each map of ``names`` holds ``paths`` paths, every one active, and
    queues with no path left as the lab expects (``queue``: None, not checked). One sentence per problem."""
    problems = []
    if not daemon:
        problems.append(f"{host}: multipathd does not answer (multipathd show daemon): no path comes back by itself")
    for name in names:
        state = maps.get(name)
        if state is None or not state.paths:
            problems.append(f"{host}: the multipath map {name} is not there")
            continue
        if len(state.paths) != paths or len(state.active) != paths:
            problems.append(
                f"{host}: the multipath map {name} holds {len(state.paths)} path(s), {len(state.active)} active; "
                f"the target serves {paths}"
            )
        queues = "queue_if_no_path" in state.features
        if queue is not None and queues != queue:
            problems.append(
                f"{host}: the multipath map {name} {'queues' if queues else 'fails'} I/O with no path left, "
                f"expected it to {'queue' if queue else 'fail'} (multipath.dm.queue_if_no_path; multipath.conf's "
                "no_path_retry)"
            )
    return problems


def problems_everywhere(
    hosts: Sequence[Host], devices: Mapping[str, Sequence[str]], paths: int, queue: bool | None
) -> list[str]:
    """:func:`map_problems` on every host at once; ``devices``: host -> its maps as ``/dev/mapper/NAME``."""
    names = {host: [d.rsplit("/", 1)[-1] for d in found] for host, found in devices.items()}
    read = each(hosts, lambda host: read_maps(host, names[host.name]), check=False)
    problems = []
    for host, value in read.items():
        if isinstance(value, BaseException):
            problems.append(f"{host}: its multipath maps could not be read: {value}")
        else:
            problems += map_problems(host, value[0], value[1], names[host], paths, queue)
    return problems


def conf_path(name_prefix: str, conf_dir: str = CONF_DIR) -> str:
    """Where the lab's ``multipath.dm_conf`` goes for fabrics of ``name_prefix``."""
    return f"{conf_dir}/{name_prefix}.conf"


def write_conf(host: Host, name_prefix: str, text: str, mark: str, conf_dir: str = CONF_DIR) -> None:
    """Write ``text`` (first line ``mark``) as our configuration file and have multipathd read it; refused with
    :class:`CommandError` when a file of that name exists without our mark."""
    path = conf_path(name_prefix, conf_dir)
    result = host.run(["sh", "-c", WRITE_CONF, "sh", path, text, mark], check=False)
    if result.exit_code == 3:
        raise CommandError(result, f"{path} exists and was not written by fabricqa")
    if not result.ok:
        raise CommandError(result, f"could not write {path} or have multipathd read it")


def has_conf(host: Host, name_prefix: str, mark: str, conf_dir: str = CONF_DIR) -> bool:
    """Whether our configuration file for ``name_prefix`` is there (with our mark)."""
    path = conf_path(name_prefix, conf_dir)
    return host.run(["sh", "-c", 'head -n 1 "$1" 2>/dev/null | grep -qF -- "$2"', "sh", path, mark], check=False).ok


def remove_conf(host: Host, name_prefix: str, mark: str, conf_dir: str = CONF_DIR) -> None:
    """Remove our configuration file for ``name_prefix`` (idempotent; a file without our mark stays)."""
    host.run(["sh", "-c", REMOVE_CONF, "sh", conf_path(name_prefix, conf_dir), mark])


DM_CONF_MARK = "written by pytest-fabricqa"
"""The first line of the multipath configuration file this plugin writes says so: the file is ours to remove."""


def conf_text(conf: DmConf, name_prefix: str) -> str:
    """The lab's ``multipath.dm_conf`` as the file's text: a mark line naming the writer, then each section with
    its keywords."""
    lines = [f"# {DM_CONF_MARK} (name_prefix {name_prefix}): removed when its fabric is torn down"]
    for section, values in (("defaults", conf.defaults), ("overrides", conf.overrides)):
        if values:
            lines += [f"{section} {{", *(f"\t{k} {v}" for k, v in values.items()), "}"]
    return "\n".join(lines) + "\n"

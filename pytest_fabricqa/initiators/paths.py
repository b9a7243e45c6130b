"""The settings that decide how a path failure plays out on an initiator, read while the fabric is connected.

When a path goes away the initiator's kernel first holds I/O and tries to get the path back; after a timeout it
fails the I/O instead, so that multipath (or Oracle ASM above it) can act. Those timeouts are per controller or
per session, so they are read on every initiator for the fabric's own controllers and sessions, in one command
(:data:`PATHS_SCRIPT`), and compared with the lab's ``multipath`` section (:class:`~pytest_fabricqa.lab.model.
MultipathSettings`; a key it does not give is not checked, but every value is read and recorded):

- NVMe-oF: ``/sys/module/nvme_core/parameters/multipath`` (``Y``: the kernel's native multipath merges a
  namespace's paths into one ``/dev/nvmeXnY``), each of the fabric's subsystems' ``iopolicy``
  (``/sys/class/nvme-subsystem/nvme-subsysN``, found by its ``subsysnqn``), and each of the fabric's
  controllers' ``ctrl_loss_tmo``, ``reconnect_delay`` and ``fast_io_fail_tmo`` (``/sys/class/nvme/nvmeX``). The
  kernel prints ``off`` for -1 (ctrl_loss_tmo: reconnect for ever; fast_io_fail_tmo: never fail I/O early), and
  shows ctrl_loss_tmo as the number of reconnects it keeps times reconnect_delay.
- iSCSI and iSER: each of the fabric's sessions' ``recovery_tmo`` (``/sys/class/iscsi_session/sessionN``) and
  each of its connections' ``recv_tmo`` and ``ping_tmo`` (``/sys/class/iscsi_connection/connectionN:C``). iscsid
  gives the kernel open-iscsi's node settings under these names when the session logs in (open-iscsi's
  usr/initiator_common.c, iscsi_session_set_params): ``node.session.timeo.replacement_timeout`` becomes the
  session's recovery_tmo (ISCSI_PARAM_SESS_RECOVERY_TMO), ``node.conn[0].timeo.noop_out_interval`` the
  connection's recv_tmo (ISCSI_PARAM_RECV_TMO: a nop-out is sent after that long without a PDU from the target)
  and ``node.conn[0].timeo.noop_out_timeout`` its ping_tmo (ISCSI_PARAM_PING_TMO: the connection fails when the
  nop-out has no answer after that long); libiscsi prints them back as given (iscsi_conn_get_param), and
  scsi_transport_iscsi prints recovery_tmo as an integer, -1 (or any negative) meaning never.

dm-multipath's maps (multipathd, paths per map, queueing) are read by :mod:`.dm`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_fabricqa.lab.model import IscsiPathSettings, MultipathSettings, NvmePathSettings
from pytest_fabricqa.report.model import Case, Check
from pytest_fabricqa.transport.base import Host
from pytest_fabricqa.transport.fanout import each

SYSFS = "/sys"
"""Where the script reads; the unit tests run it on a folder of recorded values instead."""

# Fixed text. $1: the sysfs root; then the fabric's subsystem NQNs or target IQNs. Tab-separated lines, the kind,
# the kernel's name for the object, then attribute=value as the kernel prints it (empty when it shows no such
# file): the nvme_core module, and every NVMe subsystem, NVMe controller, iSCSI session and its connections whose
# subsysnqn or targetname is one of the arguments.
PATHS_SCRIPT = r"""
sys=$1
shift
ours() {
  n=$1
  shift
  for w in "$@"; do [ "$w" = "$n" ] && return 0; done
  return 1
}
printf 'module\tnvme_core\tmultipath=%s\n' "$(cat "$sys/module/nvme_core/parameters/multipath" 2>/dev/null)"
for d in "$sys"/class/nvme-subsystem/nvme-subsys*; do
  q=$(cat "$d/subsysnqn" 2>/dev/null) && ours "$q" "$@" || continue
  printf 'subsystem\t%s\tsubsysnqn=%s\tiopolicy=%s\n' "${d##*/}" "$q" "$(cat "$d/iopolicy" 2>/dev/null)"
done
for c in "$sys"/class/nvme/nvme*; do
  q=$(cat "$c/subsysnqn" 2>/dev/null) && ours "$q" "$@" || continue
  printf 'controller\t%s\tsubsysnqn=%s' "${c##*/}" "$q"
  for a in ctrl_loss_tmo reconnect_delay fast_io_fail_tmo; do
    printf '\t%s=%s' "$a" "$(cat "$c/$a" 2>/dev/null)"
  done
  printf '\n'
done
for s in "$sys"/class/iscsi_session/session*; do
  q=$(cat "$s/targetname" 2>/dev/null) && ours "$q" "$@" || continue
  printf 'session\t%s\ttargetname=%s\trecovery_tmo=%s\n' "${s##*/}" "$q" "$(cat "$s/recovery_tmo" 2>/dev/null)"
  for k in "$sys"/class/iscsi_connection/connection"${s##*/session}":*; do
    [ -d "$k" ] || continue
    printf 'connection\t%s\tsession=%s\trecv_tmo=%s\tping_tmo=%s\n' "${k##*/}" "${s##*/}" \
      "$(cat "$k/recv_tmo" 2>/dev/null)" "$(cat "$k/ping_tmo" 2>/dev/null)"
  done
done
"""


@dataclass(frozen=True)
class Setting:
    """One value compared: the sysfs file, the lab's key for it and how a problem names it."""

    attribute: str
    key: str
    label: str
    seconds: bool = True


CONTROLLER_SETTINGS = (
    Setting("ctrl_loss_tmo", "ctrl_loss_tmo_s", "ctrl_loss_tmo"),
    Setting("reconnect_delay", "reconnect_delay_s", "reconnect_delay"),
    Setting("fast_io_fail_tmo", "fast_io_fail_tmo_s", "fast_io_fail_tmo"),
)
SUBSYSTEM_SETTINGS = (Setting("iopolicy", "iopolicy", "iopolicy", seconds=False),)
SESSION_SETTINGS = (Setting("recovery_tmo", "recovery_tmo_s", "recovery_tmo (replacement_timeout)"),)
CONNECTION_SETTINGS = (
    Setting("recv_tmo", "recv_tmo_s", "recv_tmo (noop_out_interval)"),
    Setting("ping_tmo", "ping_tmo_s", "ping_tmo (noop_out_timeout)"),
)


@dataclass(frozen=True)
class NvmeSubsystem:
    """An NVMe subsystem as one initiator sees it (``nvme-subsys0``) and its I/O policy."""

    name: str
    nqn: str
    values: dict[str, str]
    """``iopolicy`` as the kernel prints it; empty when it shows none (a kernel without native multipath)."""


@dataclass(frozen=True)
class Controller:
    """An NVMe-oF controller (``nvme0``): one path to one subsystem."""

    name: str
    nqn: str
    values: dict[str, str]
    """``ctrl_loss_tmo``, ``reconnect_delay``, ``fast_io_fail_tmo`` as printed (``600``, ``off``); empty: not shown."""


@dataclass(frozen=True)
class Connection:
    """An iSCSI connection (``connection3:0``) of a session."""

    name: str
    values: dict[str, str]
    """``recv_tmo`` and ``ping_tmo`` in seconds, as printed."""


@dataclass(frozen=True)
class Session:
    """An iSCSI or iSER session (``session3``) to one target IQN, with its connections."""

    name: str
    iqn: str
    values: dict[str, str]
    """``recovery_tmo`` in seconds, as printed (negative: never)."""
    connections: tuple[Connection, ...] = ()


@dataclass(frozen=True)
class PathSettings:
    """What :data:`PATHS_SCRIPT` read on one initiator."""

    native_multipath: str = ""
    """``Y`` or ``N``; empty when nvme_core is not loaded."""
    subsystems: tuple[NvmeSubsystem, ...] = ()
    controllers: tuple[Controller, ...] = ()
    sessions: tuple[Session, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Every value read, for the report."""
        return {
            "nvme_core.multipath": self.native_multipath,
            "subsystems": {s.name: {"subsysnqn": s.nqn, **s.values} for s in self.subsystems},
            "controllers": {c.name: {"subsysnqn": c.nqn, **c.values} for c in self.controllers},
            "sessions": {
                s.name: {
                    "targetname": s.iqn,
                    **s.values,
                    "connections": {k.name: dict(k.values) for k in s.connections},
                }
                for s in self.sessions
            },
        }

    def summary(self, family: str) -> str:
        """One line of every value of ``family`` ("nvme" or "scsi") read, for the report's table."""
        if family == "nvme":
            parts = [f"native multipath {self.native_multipath or 'not shown'}"]
            parts += [f"{s.name} ({s.nqn}) {_values(s.values)}" for s in self.subsystems]
            parts += [f"{c.name} ({c.nqn}) {_values(c.values)}" for c in self.controllers]
        else:
            parts = []
            for s in self.sessions:
                parts.append(f"{s.name} ({s.iqn}) {_values(s.values)}")
                parts += [f"{k.name} {_values(k.values)}" for k in s.connections]
        return "; ".join(parts) or "nothing of this fabric"


def _values(values: Mapping[str, str]) -> str:
    return ", ".join(f"{key} {value or 'not shown'}" for key, value in values.items())


def parse_path_settings(text: str) -> PathSettings:
    """:data:`PATHS_SCRIPT`'s output as :class:`PathSettings` (connections go with the session they name)."""
    native = ""
    subsystems: list[NvmeSubsystem] = []
    controllers: list[Controller] = []
    sessions: list[tuple[str, str, dict[str, str]]] = []
    connections: dict[str, list[Connection]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        name, _, attributes = rest.partition("\t")
        values = dict(word.partition("=")[::2] for word in attributes.split("\t") if word)
        if kind == "module" and name == "nvme_core":
            native = values.get("multipath", "")
        elif kind == "subsystem":
            nqn = values.pop("subsysnqn", "")
            subsystems.append(NvmeSubsystem(name, nqn, values))
        elif kind == "controller":
            nqn = values.pop("subsysnqn", "")
            controllers.append(Controller(name, nqn, values))
        elif kind == "session":
            iqn = values.pop("targetname", "")
            sessions.append((name, iqn, values))
        elif kind == "connection":
            session = values.pop("session", "")
            connections.setdefault(session, []).append(Connection(name, values))
    return PathSettings(
        native,
        tuple(subsystems),
        tuple(controllers),
        tuple(Session(n, iqn, v, tuple(connections.get(n, ()))) for n, iqn, v in sessions),
    )


def read_path_settings(host: Host, subsystems: Iterable[str], sysfs: str = SYSFS) -> PathSettings:
    """The path settings of ``host`` for the controllers and sessions of ``subsystems`` (NQNs or IQNs), in one
    command."""
    return parse_path_settings(host.run(["sh", "-c", PATHS_SCRIPT, "sh", sysfs, *subsystems]).stdout)


def read_everywhere(hosts: Iterable[Host], subsystems: Sequence[str]) -> tuple[dict[str, PathSettings], list[str]]:
    """:func:`read_path_settings` on every host at once: what was read, and one problem per host that could not
    be read."""
    found = each(hosts, lambda host: read_path_settings(host, subsystems), check=False)
    read = {name: value for name, value in found.items() if isinstance(value, PathSettings)}
    problems = [
        f"{name}: its path settings could not be read: {str(value).splitlines()[0] if str(value) else value!r}"
        for name, value in found.items()
        if isinstance(value, BaseException)
    ]
    return read, problems


# -- the comparison ---------------------------------------------------------------------------------------------


def _shown(value: str, setting: Setting) -> str:
    if not value:
        return "not shown"
    return f"{value} s" if setting.seconds and value.lstrip("-").isdigit() else value


def _compare(
    where: str,
    values: Mapping[str, str],
    settings: Iterable[Setting],
    expected: NvmePathSettings | IscsiPathSettings,
    section: str | None = None,
) -> list[str]:
    section = section or ("nvme" if isinstance(expected, NvmePathSettings) else "iscsi")
    problems = []
    for setting in settings:
        want = getattr(expected, setting.key)
        if want is None:
            continue
        found = values.get(setting.attribute, "")
        if found != str(want):
            problems.append(
                f"{where}: {setting.label} is {_shown(found, setting)}, expected {_shown(str(want), setting)} "
                f"(multipath.{section}.{setting.key})"
            )
    return problems


def _checks_any(expected: NvmePathSettings | IscsiPathSettings, settings: Iterable[Setting]) -> bool:
    return any(getattr(expected, s.key) is not None for s in settings)


def nvme_problems(host: str, read: PathSettings, nqns: Sequence[str], expected: NvmePathSettings) -> list[str]:
    """Every NVMe-oF setting of ``host`` that is not what the lab expects, for the subsystems ``nqns`` only."""
    problems = []
    if expected.native is not None:
        want = "Y" if expected.native else "N"
        if read.native_multipath != want:
            found = {"Y": "on (Y)", "N": "off (N)"}.get(read.native_multipath, read.native_multipath or "not shown")
            problems.append(
                f"{host}: native NVMe multipath (/sys/module/nvme_core/parameters/multipath) is {found}, expected "
                f"{'on (Y)' if expected.native else 'off (N)'} (multipath.nvme.native)"
            )
    controllers = [c for c in read.controllers if c.nqn in nqns]
    if not controllers and _checks_any(expected, CONTROLLER_SETTINGS + SUBSYSTEM_SETTINGS):
        problems.append(f"{host}: no NVMe-oF controller of {', '.join(nqns)} is connected: its settings cannot be read")
    for controller in controllers:
        where = f"{host}: controller {controller.name} of {controller.nqn}"
        problems += _compare(where, controller.values, CONTROLLER_SETTINGS, expected)
    for nqn in dict.fromkeys(c.nqn for c in controllers):
        subsystem = next((s for s in read.subsystems if s.nqn == nqn), None)
        where = f"{host}: {subsystem.name} ({nqn})" if subsystem else f"{host}: the subsystem {nqn}"
        problems += _compare(where, subsystem.values if subsystem else {}, SUBSYSTEM_SETTINGS, expected)
    return problems


def iscsi_problems(
    host: str, read: PathSettings, iqns: Sequence[str], expected: IscsiPathSettings, section: str = "iscsi"
) -> list[str]:
    """Every iSCSI/iSER setting of ``host`` that is not what the lab expects, for the sessions to ``iqns`` only
    (``section``: where in the lab's ``multipath`` the expected values come from, for the messages)."""
    problems = []
    sessions = [s for s in read.sessions if s.iqn in iqns]
    if not sessions and _checks_any(expected, SESSION_SETTINGS + CONNECTION_SETTINGS):
        problems.append(f"{host}: no iSCSI session to {', '.join(iqns)} is logged in: its settings cannot be read")
    for session in sessions:
        where = f"{host}: {session.name} of {session.iqn}"
        problems += _compare(where, session.values, SESSION_SETTINGS, expected, section)
        if not session.connections and _checks_any(expected, CONNECTION_SETTINGS):
            problems.append(f"{host}: {session.name} of {session.iqn} has no connection: its settings cannot be read")
        for connection in session.connections:
            where = f"{host}: {connection.name} of {session.name} ({session.iqn})"
            problems += _compare(where, connection.values, CONNECTION_SETTINGS, expected, section)
    return problems


def path_settings_problems(
    found: Mapping[str, PathSettings],
    subsystems: Sequence[str],
    family: str,
    expected: MultipathSettings,
    paths: int = 1,
) -> list[str]:
    """Every path setting on every initiator that is not what the lab expects, one sentence each naming the host,
    the controller or session and its subsystem, the setting, the value found and the value expected.

    ``found``: initiator -> what :func:`read_path_settings` read; ``subsystems``: the fabric's NQNs or IQN (any
    other controller or session is ignored); ``family``: the protocol's, "nvme" or "scsi"; ``paths``: how many
    the target serves (over several, iSCSI sessions are dm-multipath's: :meth:`MultipathSettings.iscsi_for`)."""
    problems: list[str] = []
    iscsi_expected, section = expected.iscsi_for(paths)
    for host, read in found.items():
        if family == "nvme":
            problems += nvme_problems(host, read, subsystems, expected.nvme)
        else:
            problems += iscsi_problems(host, read, subsystems, iscsi_expected, section)
    return problems


def path_settings_case(
    nodeid: str,
    case_id: str,
    protocol: str,
    target: str,
    family: str,
    found: Mapping[str, PathSettings],
    problems: Sequence[str],
    expected: MultipathSettings,
    paths: int = 1,
) -> Case:
    """The report's case: one check per initiator listing every value read (failed when a problem names the
    host), the problems as violations, and in ``extras["path_settings"]`` every value and what the lab expects."""
    section = expected.nvme if family == "nvme" else expected.iscsi_for(paths)[0]
    checks = tuple(
        Check(
            f"{host} path settings",
            "failed" if any(p.startswith(f"{host}: ") for p in problems) else "passed",
            f"{host}: {read.summary(family)}",
        )
        for host, read in sorted(found.items())
    )
    return Case(
        nodeid=nodeid,
        case_id=case_id,
        suite="connectivity",
        verdict="passed",
        protocol=protocol,
        target=target,
        violations=tuple(problems),
        checks=checks,
        extras={
            "path_settings": {
                "read": {host: read.to_json() for host, read in sorted(found.items())},
                "expected": {"nvme" if family == "nvme" else "iscsi": section.model_dump(exclude_none=True)},
            }
        },
    )

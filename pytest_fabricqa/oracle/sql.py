"""Read GV$ASM_* through python-oracledb: connect as SYSASM, return rows keyed by column.

Thin mode (pure Python) is the default. Thick mode (``driver_mode: thick``, optional ``lib_dir``) loads the
Oracle Client libraries through ``oracledb.init_oracle_client`` once per process, for databases thin mode cannot
reach: releases before 12.1, or accounts whose password has only a 10G verifier.

Credentials come from the environment, never from the lab file: by default ``FABRICQA_ORACLE_USER`` and
``FABRICQA_ORACLE_PASSWORD`` (the names are configurable per connection), or from an Oracle wallet
(``wallet_location`` / ``config_dir``, with ``FABRICQA_ORACLE_WALLET_PASSWORD``-style variable named in
the settings when the wallet is encrypted). A password never appears in a repr, a log line or an error.

The ASM service name ``+ASM`` does not parse as an Easy Connect string in thin mode, so connections are
made with host/port/service_name keywords, or with a full connect descriptor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_fabricqa.core.errors import UserError
from pytest_fabricqa.lab.database import ConnectSettings

Row = dict[str, object]

# Columns read, all documented in the Oracle Database Reference. GV$ASM_DISK_STAT would avoid a disk
# discovery, but V$ASM_DISK is what the health rules are written against and discovery is what notices
# a vanished path.
DISKGROUP_COLUMNS = (
    "INST_ID",
    "GROUP_NUMBER",
    "NAME",
    "STATE",
    "TYPE",
    "TOTAL_MB",
    "FREE_MB",
    "REQUIRED_MIRROR_FREE_MB",
    "USABLE_FILE_MB",
    "OFFLINE_DISKS",
)
DISK_COLUMNS = (
    "INST_ID",
    "GROUP_NUMBER",
    "DISK_NUMBER",
    "NAME",
    "PATH",
    "MODE_STATUS",
    "MOUNT_STATUS",
    "STATE",
    "HEADER_STATUS",
    "REPAIR_TIMER",
    "READ_ERRS",
    "WRITE_ERRS",
)
OPERATION_COLUMNS = ("INST_ID", "GROUP_NUMBER", "OPERATION", "STATE", "ERROR_CODE")
# PASS exists from 12.1 on; asked for separately so 11.2 still works.
OPERATION_COLUMNS_12C = (*OPERATION_COLUMNS, "PASS")


class OracleConfigError(UserError):
    """The Oracle settings cannot work (missing credentials or target); the message says how to fix it."""


def init_driver(driver_mode: str, lib_dir: str | None = None, *, driver: Any = None) -> None:
    """Switch python-oracledb to thick mode when ``driver_mode`` is "thick" (thin needs nothing).

    ``driver`` replaces the ``oracledb`` module (tests pass a stand-in). A missing or unloadable Oracle Client
    library becomes one :class:`OracleConfigError` line naming the keys to fix.
    """
    if driver_mode != "thick":
        return
    if driver is None:
        import oracledb as driver
    kwargs = {"lib_dir": lib_dir} if lib_dir else {}
    try:
        driver.init_oracle_client(**kwargs)
    except driver.Error as exc:
        text = str(exc).strip() or type(exc).__name__
        # DPI-1047 runs on with a documentation link; the first sentence is the fact.
        first = text.splitlines()[0].split(". See http", 1)[0]
        where = f"in lib_dir {lib_dir}" if lib_dir else "on the library search path"
        raise OracleConfigError(
            f"database.driver_mode thick: no usable Oracle Client library {where} ({first}); install Oracle "
            "Instant Client and set database.lib_dir to its folder, or use driver_mode: thin"
        ) from None


def connect_kwargs(settings: ConnectSettings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments for ``oracledb.connect``, credentials included (do not log the result).

    Raises :class:`OracleConfigError` naming the variable to set when credentials are missing.
    """
    env = os.environ if environ is None else environ
    kwargs: dict[str, Any] = {}
    if settings.descriptor:
        kwargs["dsn"] = settings.descriptor
    elif settings.host and settings.service_name:
        kwargs.update(host=settings.host, port=settings.port, service_name=settings.service_name)
        if settings.instance_name:
            kwargs["instance_name"] = settings.instance_name
    else:
        raise OracleConfigError(
            "Oracle connection needs either `descriptor` or `host` and `service_name` in the lab file's "
            "database section."
        )
    if settings.config_dir:
        kwargs["config_dir"] = settings.config_dir
    if settings.wallet_location:
        kwargs["wallet_location"] = settings.wallet_location
        if settings.wallet_password_env:
            wallet_password = env.get(settings.wallet_password_env)
            if not wallet_password:
                raise OracleConfigError(
                    f"The wallet at {settings.wallet_location} needs its password in the environment "
                    f"variable {settings.wallet_password_env}, which is not set."
                )
            kwargs["wallet_password"] = wallet_password
    user = env.get(settings.user_env)
    password = env.get(settings.password_env)
    if not user:
        raise OracleConfigError(
            f"Set the environment variable {settings.user_env} to the Oracle user for "
            f"{settings.describe()} (credentials are never read from the lab file)."
        )
    if not password and not settings.wallet_location:
        raise OracleConfigError(
            f"Set the environment variable {settings.password_env} to the password of {user} for "
            f"{settings.describe()}, or configure wallet_location."
        )
    kwargs["user"] = user
    if password:
        kwargs["password"] = password
    return kwargs


def connect(
    settings: ConnectSettings,
    *,
    mode: str = "sysasm",
    environ: Mapping[str, str] | None = None,
    connector: Callable[..., Any] | None = None,
) -> Any:
    """Open a python-oracledb connection (thin, or thick after :func:`init_driver`) as SYSASM (``mode="sysasm"``) or SYSDBA (``"sysdba"``).

    ``connector`` replaces ``oracledb.connect`` (tests pass a fake). Errors from the driver are re-raised
    with the target named and nothing of the credentials.
    """
    import oracledb  # imported here so the plugin loads without touching the driver

    kwargs = connect_kwargs(settings, environ)
    kwargs["mode"] = {"sysasm": oracledb.AUTH_MODE_SYSASM, "sysdba": oracledb.AUTH_MODE_SYSDBA}[mode]
    open_connection = connector or oracledb.connect
    try:
        return open_connection(**kwargs)
    except oracledb.Error as exc:
        # The driver's message carries the ORA-/DPY- code and never the password; keep that, drop kwargs.
        message = f"Could not connect as {mode.upper()} to {settings.describe()}: {exc}"
        raise OracleConfigError(message) from None


def query(connection: Any, statement: str, parameters: Mapping[str, Any] | None = None) -> list[Row]:
    """Run ``statement`` and return its rows as dicts keyed by upper-case column name."""
    cursor = connection.cursor()
    try:
        cursor.execute(statement, parameters or {})
        names = [str(d[0]).upper() for d in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    finally:
        cursor.close()


def _select(view: str, columns: Sequence[str]) -> str:
    # Column and view names are constants of this module, never user input.
    return f"SELECT {', '.join(columns)} FROM {view}"


def read_diskgroups(connection: Any) -> list[Row]:
    """Rows of GV$ASM_DISKGROUP."""
    statement = _select("GV$ASM_DISKGROUP", DISKGROUP_COLUMNS) + " ORDER BY INST_ID, GROUP_NUMBER"
    return query(connection, statement)


def read_disks(connection: Any, paths: Sequence[str] = ()) -> list[Row]:
    """Rows of GV$ASM_DISK for disks in a disk group (GROUP_NUMBER > 0), and the group-0 rows of ``paths``.

    A member whose header was overwritten drops to group 0 (HEADER_STATUS CANDIDATE, FORMER or PROVISIONED);
    ``paths`` are the lab's devices as ASM sees them, bound as variables, never pasted into the SQL.
    """
    order = " ORDER BY INST_ID, GROUP_NUMBER, DISK_NUMBER"
    wanted = list(dict.fromkeys(p for p in paths if p))
    if not wanted:
        return query(connection, _select("GV$ASM_DISK", DISK_COLUMNS) + " WHERE GROUP_NUMBER > 0" + order)
    binds = {f"p{i}": path for i, path in enumerate(wanted)}
    where = f" WHERE GROUP_NUMBER > 0 OR PATH IN ({', '.join(':' + name for name in binds)})"
    return query(connection, _select("GV$ASM_DISK", DISK_COLUMNS) + where + order, binds)


def read_operations(connection: Any) -> list[Row]:
    """Rows of GV$ASM_OPERATION (with PASS where the release has it)."""
    import oracledb

    try:
        return query(connection, _select("GV$ASM_OPERATION", OPERATION_COLUMNS_12C))
    except oracledb.DatabaseError:
        # ORA-00904 on 11.2, which has no PASS column.
        return query(connection, _select("GV$ASM_OPERATION", OPERATION_COLUMNS))


def read_asm_snapshot(connection: Any, paths: Sequence[str] = ()) -> dict[str, list[Row]]:
    """Disk groups, disks (with the group-0 rows of ``paths``) and operations, as the health rules take them."""
    return {
        "diskgroups": read_diskgroups(connection),
        "disks": read_disks(connection, paths),
        "operations": read_operations(connection),
    }

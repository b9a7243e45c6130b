"""The SQL adapter: connect keywords and credentials, and GV$ASM_* reads against the fake connection.

No Oracle database can run here; FakeConnection stands in for python-oracledb's Connection (see its
docstring). What is proven is the adapter's plumbing, not Oracle's answers.
"""

from __future__ import annotations

from typing import Any

import oracledb
import pytest

from pytest_fabricqa.lab.database import ConnectSettings
from pytest_fabricqa.oracle import sql
from pytest_fabricqa.oracle.fake import FakeConnection, FakeResult
from pytest_fabricqa.oracle.health import check_asm_health

SECRET = "s3cr3t-Pa55"
ENV = {"FABRICQA_ORACLE_USER": "sys", "FABRICQA_ORACLE_PASSWORD": SECRET}
ASM = ConnectSettings(host="el72h1-vip", port=1521, service_name="+ASM", instance_name="+ASM1")


def test_asm_is_reached_with_keywords_not_easy_connect() -> None:
    kwargs = sql.connect_kwargs(ASM, ENV)
    assert kwargs == {
        "host": "el72h1-vip",
        "port": 1521,
        "service_name": "+ASM",
        "instance_name": "+ASM1",
        "user": "sys",
        "password": SECRET,
    }
    assert "dsn" not in kwargs


def test_a_descriptor_is_passed_as_dsn() -> None:
    descriptor = "(DESCRIPTION=(ADDRESS=(PROTOCOL=TCP)(HOST=el72h1)(PORT=1521))(CONNECT_DATA=(SERVICE_NAME=+ASM)))"
    kwargs = sql.connect_kwargs(ConnectSettings(descriptor=descriptor), ENV)
    assert kwargs["dsn"] == descriptor and "host" not in kwargs


def test_wallet_settings_need_no_password_variable() -> None:
    settings = ConnectSettings(
        host="h", service_name="+ASM", wallet_location="/etc/wallet", config_dir="/etc/tns",
        wallet_password_env="FABRICQA_WALLET_PASSWORD",
    )  # fmt: skip
    kwargs = sql.connect_kwargs(settings, {"FABRICQA_ORACLE_USER": "asmsnmp", "FABRICQA_WALLET_PASSWORD": "w"})
    assert kwargs["wallet_location"] == "/etc/wallet" and kwargs["config_dir"] == "/etc/tns"
    assert kwargs["wallet_password"] == "w" and "password" not in kwargs


@pytest.mark.parametrize(
    ("settings", "environ", "named"),
    [
        (ASM, {}, "FABRICQA_ORACLE_USER"),
        (ASM, {"FABRICQA_ORACLE_USER": "sys"}, "FABRICQA_ORACLE_PASSWORD"),
        (ConnectSettings(host="h", service_name="+ASM", user_env="ASM_USER"), {}, "ASM_USER"),
        (ConnectSettings(host="h"), ENV, "service_name"),
        (ConnectSettings(host="h", service_name="x", wallet_location="/w", wallet_password_env="WPW"), ENV, "WPW"),
    ],
)
def test_missing_settings_name_the_fix(settings: ConnectSettings, environ: dict[str, str], named: str) -> None:
    with pytest.raises(sql.OracleConfigError, match=named):
        sql.connect_kwargs(settings, environ)


def test_credentials_never_appear_in_settings_repr() -> None:
    # Settings hold only the *names* of the variables.
    assert SECRET not in repr(ASM) and "FABRICQA_ORACLE_PASSWORD" in repr(ASM)


def test_connect_uses_sysasm_and_a_driver_error_carries_no_password() -> None:
    seen: dict[str, Any] = {}

    def connector(**kwargs: Any) -> FakeConnection:
        seen.update(kwargs)
        return FakeConnection()

    sql.connect(ASM, environ=ENV, connector=connector)
    assert seen["mode"] == oracledb.AUTH_MODE_SYSASM

    def refusing(**kwargs: Any) -> FakeConnection:
        raise oracledb.DatabaseError("ORA-01017: invalid credential or not authorized; logon denied")

    with pytest.raises(sql.OracleConfigError) as error:
        sql.connect(ASM, mode="sysdba", environ=ENV, connector=refusing)
    message = str(error.value)
    assert "ORA-01017" in message and "el72h1-vip:1521/+ASM" in message and "SYSDBA" in message
    assert SECRET not in message and SECRET not in repr(error.value)
    assert error.value.__cause__ is None and error.value.__suppress_context__


def _fake_asm(operations: FakeResult | BaseException | None = None) -> FakeConnection:
    groups = FakeResult(
        sql.DISKGROUP_COLUMNS,
        [
            (1, 1, "NVME", "MOUNTED", "EXTERN", 2289440, 2287112, 0, 2287112, 0),
            (2, 1, "NVME", "MOUNTED", "EXTERN", 2289440, 2287112, 0, 2287112, 0),
        ],
    )
    disks = FakeResult(
        sql.DISK_COLUMNS,
        [
            (inst, 1, n, f"NVME_000{n}", f"/dev/nvme{n}n1", "ONLINE", "CACHED", "NORMAL", "MEMBER", 0, 0, 0)
            for inst in (1, 2)
            for n in (0, 1)
        ],
    )
    tables: dict[str, FakeResult | BaseException] = {"FROM GV$ASM_DISKGROUP": groups, "FROM GV$ASM_DISK WHERE": disks}
    tables["FROM GV$ASM_OPERATION"] = operations or FakeResult(sql.OPERATION_COLUMNS_12C, [])
    return FakeConnection(tables)


def test_snapshot_rows_are_keyed_by_column_and_judged_healthy() -> None:
    connection = _fake_asm()
    snap = sql.read_asm_snapshot(connection)
    assert snap["diskgroups"][0] == {
        "INST_ID": 1, "GROUP_NUMBER": 1, "NAME": "NVME", "STATE": "MOUNTED", "TYPE": "EXTERN",
        "TOTAL_MB": 2289440, "FREE_MB": 2287112, "REQUIRED_MIRROR_FREE_MB": 0, "USABLE_FILE_MB": 2287112,
        "OFFLINE_DISKS": 0,
    }  # fmt: skip
    assert len(snap["disks"]) == 4
    assert any("WHERE GROUP_NUMBER > 0" in s for s in connection.executed)
    verdict = check_asm_health(snap["diskgroups"], snap["disks"], snap["operations"], expected=["NVME"])
    assert verdict.healthy


def test_a_running_rebalance_read_through_sql_is_reported() -> None:
    operations = FakeResult(sql.OPERATION_COLUMNS_12C, [(1, 1, "REBAL", "RUN", None, "REBALANCE")])
    snap = sql.read_asm_snapshot(_fake_asm(operations))
    verdict = check_asm_health(snap["diskgroups"], snap["disks"], snap["operations"], expected=["NVME"])
    assert [p.rule for p in verdict.problems] == ["operation-running"]


def test_releases_without_the_pass_column_fall_back() -> None:
    connection = _fake_asm()
    tables = dict(connection.tables)
    tables["STATE, ERROR_CODE, PASS FROM GV$ASM_OPERATION"] = oracledb.DatabaseError(
        'ORA-00904: "PASS": invalid identifier'
    )
    tables["FROM GV$ASM_OPERATION"] = FakeResult(sql.OPERATION_COLUMNS, [(1, 1, "REBAL", "ERRS", "ORA-15041")])
    connection.tables = tables
    rows = sql.read_operations(connection)
    assert rows == [{"INST_ID": 1, "GROUP_NUMBER": 1, "OPERATION": "REBAL", "STATE": "ERRS", "ERROR_CODE": "ORA-15041"}]
    assert len(connection.executed) == 2

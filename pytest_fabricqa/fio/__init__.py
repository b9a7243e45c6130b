"""fio as typed results: command lines and job files from a workload, fio's JSON as frozen dataclasses.

Parse once, at the edge: :func:`parse_fio_output` / :func:`parse_client_server` (or :func:`run_fio` /
:func:`run_fio_clients`, which also raise :class:`FioError` with fio's own message), then read figures
through :func:`figures` under the names in :data:`FIGURE_NAMES`.
"""

from __future__ import annotations

from pytest_fabricqa.fio.command import (
    DEFAULT_OUTPUT_FORMAT,
    FIO_SERVER_PORT,
    FioError,
    client_argv,
    client_result_or_raise,
    fio_argv,
    fio_timeout,
    job_file,
    job_names,
    result_or_raise,
    run_fio,
    run_fio_clients,
    server_argv,
    server_stop_argv,
)
from pytest_fabricqa.fio.figures import FIGURE_NAMES, figures, shared_offsets, start_offsets, total_mismatch
from pytest_fabricqa.fio.model import (
    ClientServerResult,
    DirectionStats,
    FioResult,
    FioServer,
    JobStats,
    LatencyHistogram,
)
from pytest_fabricqa.fio.parse import (
    FioOutputError,
    fio_messages,
    parse_client_server,
    parse_fio_output,
    split_output,
)

__all__ = [
    "DEFAULT_OUTPUT_FORMAT",
    "FIGURE_NAMES",
    "FIO_SERVER_PORT",
    "ClientServerResult",
    "DirectionStats",
    "FioError",
    "FioOutputError",
    "FioResult",
    "FioServer",
    "JobStats",
    "LatencyHistogram",
    "client_argv",
    "client_result_or_raise",
    "figures",
    "fio_argv",
    "fio_messages",
    "fio_timeout",
    "job_file",
    "job_names",
    "parse_client_server",
    "parse_fio_output",
    "result_or_raise",
    "run_fio",
    "run_fio_clients",
    "server_argv",
    "server_stop_argv",
    "shared_offsets",
    "split_output",
    "start_offsets",
    "total_mismatch",
]

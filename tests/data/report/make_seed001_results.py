"""Turn seed001_table.tsv (a hand transcription of seed 001's table) into two results files.

Run from this folder: ``PYTHONPATH=/work/main python3 make_seed001_results.py``. Only the figure columns go
into the results files; the seed's trend columns stay in the TSV, so the comparison test checks computed
trends against the seed's printed ones rather than against anything derived from them.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from pytest_fabricqa.core.workloads import WRITING_RW, Workload
from pytest_fabricqa.report.model import Case, Environment, Run, write_json

HERE = Path(__file__).parent
SOURCE = "transcribed from seed 001 (/work/shared/seeds/001_dc05af81bd8e62a1.txt), not measured by fabricqa"


def rows() -> list[dict[str, str]]:
    lines = [ln for ln in (HERE / "seed001_table.tsv").read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def build(protocol: str, prefix: str) -> Run:
    cases = []
    for r in rows():
        name = f"{r['rw']}-8k-{r['size']}-j{r['numjobs']}"
        cases.append(
            Case(
                nodeid=f"seed001::{protocol}::{name}",
                case_id=f"{protocol}-{name}",
                suite="performance",
                verdict="passed",
                protocol=protocol,
                # The seed gives block size, file size and job count, not queue depth or runtime.
                workload=Workload(
                    name=name,
                    rw=r["rw"],
                    bs="8k",
                    numjobs=int(r["numjobs"]),
                    iodepth=None,
                    runtime=None,
                    size=r["size"],
                    writes=r["rw"] in WRITING_RW,
                ),
                figures={"iops": float(r[f"{prefix}_iops"]), "mbps": float(r[f"{prefix}_mbps"])},
            )
        )
    # The seed gives no date; a fixed placeholder keeps the files reproducible.
    when = datetime(2024, 1, 1, tzinfo=UTC)
    return Run(
        lab="seed001-vmware",
        protocols=(protocol,),
        target_kind="unknown (seed 001 does not say)",
        started=when,
        finished=when,
        environment=Environment(),
        cases=tuple(cases),
        extras={"source": SOURCE, "os": "Oracle Linux 8.9 guests, VMware Workstation Pro 17.5.0"},
    )


if __name__ == "__main__":
    write_json(build("iscsi", "iscsi"), HERE / "seed001_iscsi.json")
    write_json(build("soft-roce", "softroce"), HERE / "seed001_softroce.json")

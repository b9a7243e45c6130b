"""Which cases may run at the same time: cases that load one target host share one xdist group."""

from __future__ import annotations

from pytest_fabricqa.lab import LabModel


def load_group(lab: LabModel, protocol: str | None) -> str:
    """The xdist group of a case that loads the target serving ``protocol``.

    Grouped per target *host* (or external portal), not per target kind: nvmet and LIO on one storage node
    share its devices and CPUs, so their figures would disturb each other just the same.
    """
    if protocol is None:
        targets = {t.host or t.address or "" for t in lab.targets}
        return f"{lab.name}-target-" + "+".join(sorted(targets))
    target = lab.target_for(protocol)
    return f"{lab.name}-target-{target.host or target.address}"

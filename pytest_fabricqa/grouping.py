"""Which cases may run at the same time, and in which order: cases that load one target host share one xdist
group, and the cases of one (protocol, target) run one after another."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from pytest_fabricqa.lab import LabModel

T = TypeVar("T")


def load_group(lab: LabModel, protocol: str | None, target: str | None = None) -> str:
    """The xdist group of a case that loads the target ``target`` (or the first one) serving ``protocol``.

    Grouped per target *host* (or external portal), not per target kind or name: nvmet and SPDK (or LIO and
    SCST) on one storage node share its devices, CPUs and portals, so they must take turns.
    """
    if protocol is None:
        targets = {t.host or t.address or "" for t in lab.targets}
        return f"{lab.name}-target-" + "+".join(sorted(targets))
    model = lab.target_for(protocol, target)
    return f"{lab.name}-target-{model.host or model.address}"


def runs_together(
    items: Sequence[T],
    *,
    phase: Callable[[T], int],
    key: Callable[[T], Hashable | None],
    last: Callable[[T], int] = lambda _: 0,
) -> list[T]:
    """``items`` ordered by phase (stable), and within a phase every item of one key (a (protocol, target)
    pair) moved up to the first item of that key, so each key's items run in one stretch, ordered by ``last``
    (stable: 0 first, then 1, ...; True counts as 1) at the end of its stretch; items without a key keep their
    place relative to each other."""
    out: list[T] = []
    for current in sorted({phase(i) for i in items}):
        in_phase = [i for i in items if phase(i) == current]
        blocks: dict[Hashable, list[T]] = {}
        for item in in_phase:
            k = key(item)
            if k is not None:
                blocks.setdefault(k, []).append(item)
        for item in in_phase:
            k = key(item)
            if k is None:
                out.append(item)
            elif k in blocks:
                block = blocks.pop(k)
                out.extend(sorted(block, key=lambda i: int(last(i))))
    return out

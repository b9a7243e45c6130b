"""The build cache the image and the vendor builds share: one builder per entry at a time, and an entry appears
whole or not at all (built in a temporary folder beside it, then renamed into place)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block: one builder per cache entry."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_into_place(final: Path, build: Callable[[Path], T]) -> T:
    """Run ``build(work)`` in a new temporary folder beside ``final``, then put that folder in ``final``'s place
    (replacing an older one); the temporary folder never outlives a failed build."""
    work = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=final.parent))
    try:
        result = build(work)
        if final.exists():
            shutil.rmtree(final)
        os.rename(work, final)
        return result
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)

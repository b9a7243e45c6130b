"""pytest-fabricqa: qualify storage fabrics (NVMe-oF, iSCSI, iSER) with pytest.

The entry points are :mod:`pytest_fabricqa.plugin` (pytest's), :mod:`pytest_fabricqa.api` (what a suite of one's
own imports) and the two commands (``fabricqa-vlab``, ``fabricqa-compare``); the packages and what each may import
are in the README's "Layout" and in ``.importlinter``.
"""

from __future__ import annotations

from pytest_fabricqa.core import moved

__version__ = "0.1.0"

moved.install()

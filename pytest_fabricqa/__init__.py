"""pytest-fabricqa: qualify storage fabrics (NVMe-oF, iSCSI, iSER) with pytest."""

from __future__ import annotations

__version__ = "0.1.0"

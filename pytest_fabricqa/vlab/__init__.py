"""The virtual lab: QEMU guests running Debian's kernel with real NVMe-oF, LIO and Soft-RoCE.

Public API: :func:`build_image` (cached guest image), :class:`VlabSpec` / :class:`Guest` / :class:`Drive`
(what to boot), :class:`VirtualLab` (start, attach, stop) and :func:`cleanup_stale`.
"""

from __future__ import annotations

from pytest_fabricqa.vlab.image import Image, ImageBuildError, build_image
from pytest_fabricqa.vlab.machine import VirtualLab, VlabError, cleanup_stale
from pytest_fabricqa.vlab.spec import Drive, Guest, SpecError, VlabSpec, load_spec_json

__all__ = [
    "Drive",
    "Guest",
    "Image",
    "ImageBuildError",
    "SpecError",
    "VirtualLab",
    "VlabError",
    "VlabSpec",
    "build_image",
    "cleanup_stale",
    "load_spec_json",
]

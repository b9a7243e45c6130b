"""labs/vlab.yaml as the unit tests edit it.

The virtual lab declares five targets on vstor: the kernel's nvmet and LIO first, then SPDK, SCST and tgt serving
the same NQNs and IQN. A test that turns one kernel target into another kind by editing the text (``  - kind:
lio`` -> ``  - kind: scst``) starts from :func:`vlab_kernel_text`, where the lab's own SPDK, SCST and tgt entries
are cut, so the edited target does not collide with one of them by name. tests/conftest.py puts this folder on
``sys.path``: ``from labfiles import vlab_kernel_text``.
"""

from __future__ import annotations

from pathlib import Path

from pytest_fabricqa.lab.model import LabModel

VLAB_FILE = Path(__file__).resolve().parents[1] / "labs" / "vlab.yaml"
MORE_TARGETS = "  # More targets of vstor"


def vlab_kernel_text() -> str:
    """labs/vlab.yaml's text with only its kernel targets (targets[0] nvmet, targets[1] LIO); every line before
    the cut keeps its number."""
    text = VLAB_FILE.read_text()
    start, end = text.index(MORE_TARGETS), text.index("\nvlab:\n")
    return text[:start] + text[end:]


LIO_PATHS = "    paths: all\n    devices: *devices\n"


def vlab_kernel_text_as(kind_lines: str) -> str:
    """:func:`vlab_kernel_text` with its LIO entry made another SCSI kind (``kind_lines`` replaces
    ``  - kind: lio\\n``) serving one path, as SCST and tgt do (same line numbers)."""
    text = vlab_kernel_text()
    assert LIO_PATHS in text
    return text.replace(LIO_PATHS, "    paths: first\n    devices: *devices\n", 1).replace(
        "  - kind: lio\n", kind_lines
    )


def local_lab(
    name: str, nqn: str, device: str = "{path: /dev/null}", initiators: tuple[str, ...] = ("n1", "n2")
) -> str:
    """A lab whose hosts are all this machine (local transport, storage on ``lo``): ``initiators`` and ``stor``,
    the target, serving ``device`` (the YAML of the lab's device entry ``ram0``) as one namespace of ``nqn`` over
    nvme-tcp. For pytester runs of the suites and the plugin, where a conftest stands in for the fabric."""
    hosts = "".join(
        f"  {n}: {{transport: local, roles: [initiator], storage: {{interface: lo, address: 127.0.0.1}}}}\n"
        for n in initiators
    )
    return f"""
name: {name}
hosts:
{hosts}  stor: {{transport: local, roles: [target], storage: {{interface: lo, address: 127.0.0.1}}}}
network: {{link_speed_gbps: 10, mtu: 65536, prefix_len: 8}}
protocols: [nvme-tcp]
targets:
  - kind: nvmet
    host: stor
    protocols: [nvme-tcp]
    devices:
      ram0: {device}
    nvme:
      subsystems:
        - {{nqn: "{nqn}", namespaces: [ram0]}}
"""


RECORDED_PREFIX = "fabricqa"
"""The name_prefix the recordings under tests/data were made with (every lab's default before labs got one of their
own): a test whose fake host answers with recorded listings gives its lab this prefix, so the listings' objects
carry the lab's mark."""


def as_recorded(lab: LabModel) -> LabModel:
    """``lab`` with :data:`RECORDED_PREFIX` as the name_prefix of every target that has the lab's default."""
    targets = tuple(
        t.model_copy(update={"name_prefix": RECORDED_PREFIX}) if t.name_prefix.startswith("fqa-") else t
        for t in lab.targets
    )
    return lab.model_copy(update={"targets": targets})

"""What the figures stand on, read from the lab's hosts: kernel releases and the target's first NVMe backing
device's model and firmware (the plugin's own ``pytest_fabricqa_update_environment`` hook implementation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_fabricqa.lab.model import LabModel
from pytest_fabricqa.transport.base import Host


def environment_probe(lab: LabModel, hosts: Mapping[str, Host]) -> dict[str, Any]:
    """Kernel releases of every host, and the model and firmware of the target's first NVMe backing device."""
    kernels = {name: host.run(["uname", "-r"]).stdout.strip() for name, host in hosts.items()}
    env: dict[str, Any] = {"kernels": kernels}
    for target in lab.targets:
        if target.host is None:
            continue
        for device in target.devices.values():
            name = device.path.rsplit("/", 1)[-1]
            if not name.startswith("nvme"):
                continue
            sysfs = f"/sys/class/block/{name}/device"
            out = hosts[target.host].run(["cat", f"{sysfs}/model", f"{sysfs}/firmware_rev"], check=False)
            lines = out.stdout.split("\n")
            if out.ok and len(lines) >= 2:
                env["device_model"], env["device_firmware"] = lines[0].strip(), lines[1].strip()
                return env
    return env

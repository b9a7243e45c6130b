"""The nvmet plan a lab declares for a protocol: its saved nvmetcli configuration, or ``nvme.subsystems`` on one
port (shared by the nvmet and SPDK drivers)."""

from __future__ import annotations

from pytest_fabricqa.core.protocols import protocol as protocol_spec
from pytest_fabricqa.core.undo import ProvisionError
from pytest_fabricqa.lab.model import LabModel, TargetModel
from pytest_fabricqa.targets.base import target_index
from pytest_fabricqa.targets.nvmet.plan import NvmetNamespace, NvmetPlan, NvmetPort, NvmetSubsystem, adrfam
from pytest_fabricqa.targets.nvmet.saved import load_saved_config


def plan_from_lab(lab: LabModel, model: TargetModel, protocol: str) -> NvmetPlan:
    """The plan a lab declares for ``protocol``: its saved configuration, or ``nvme.subsystems`` on one port."""
    assert model.nvme is not None
    trtype = protocol_spec(protocol).transport
    address = lab.target_address(model)
    where = f"targets[{target_index(lab, model)}]"
    if model.nvme.saved_config is not None:
        saved = load_saved_config(model.nvme.saved_config, model)
        ports = tuple(p for p in saved.ports if p.trtype == trtype)
        if not ports:
            # A file saved for rdma still serves tcp: same subsystems, a port of the protocol under test.
            ports = (
                NvmetPort(trtype, address, model.nvme.port, tuple(s.nqn for s in saved.subsystems), adrfam(address)),
            )
        return NvmetPlan(saved.subsystems, ports, saved.hosts)
    initiator_nqns = tuple(h.host_nqn for n in lab.hosts_with("initiator") if (h := lab.hosts[n]).host_nqn is not None)
    subsystems = []
    for index, sub in enumerate(model.nvme.subsystems):
        namespaces = tuple(
            NvmetNamespace(
                nsid,
                model.devices[name].path,
                name,
                nguid=model.devices[name].nguid,
                writable=model.devices[name].writable,
                destructive_ok=model.devices[name].destructive_ok,
            )
            for nsid, name in enumerate(sub.namespaces, start=1)
        )
        allowed = sub.allowed_hosts
        if not sub.allow_any_host and not allowed:
            missing = [n for n in lab.hosts_with("initiator") if lab.hosts[n].host_nqn is None]
            if missing:
                raise ProvisionError(
                    model.host or lab.name,
                    f"{where}.nvme.subsystems[{index}] ({sub.nqn}) admits only listed hosts but initiator "
                    f"{missing[0]} declares no host_nqn",
                    f"set hosts.{missing[0]}.host_nqn or list allowed_hosts",
                )
            allowed = initiator_nqns
        subsystems.append(NvmetSubsystem(sub.nqn, namespaces, sub.allow_any_host, tuple(allowed)))
    hosts = tuple(dict.fromkeys(h for s in subsystems for h in s.allowed_hosts))
    ports = tuple(  # one per path: every storage port of the host with paths: all
        NvmetPort(trtype, a, model.nvme.port, tuple(s.nqn for s in subsystems), adrfam(a))
        for a in lab.target_addresses(model)
    )
    return NvmetPlan(tuple(subsystems), ports, hosts)

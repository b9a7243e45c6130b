"""The failover suite's case names: each is a case's last id part and its key in a lab's ``thresholds`` table, so
the lab model checks threshold keys against them without importing the failover code."""

from __future__ import annotations

OUTAGES: dict[str, str] = {
    "all-paths-down-brief": "every path down for less than the path timeout, then back: I/O resumes, no error",
    "all-paths-down-long": "every path down for longer than the path timeout, then back: I/O errors are seen",
    "one-path-down": "the path carrying the I/O down while the others stay up, then back: I/O moves to a "
    "remaining path while it is down, no error",
    "ana-inaccessible": "the ANA group of the target port carrying the I/O made inaccessible, then optimized again: "
    "I/O moves to another path while it is, no error",
    "target-port-down": "the target port carrying the I/O taken away (nvmet port unlinked, SPDK listener removed), "
    "then back: I/O moves to another path while it is away, no error",
    "alua-unavailable": "the ALUA target port group of the target port carrying the I/O made unavailable, then "
    "Active/Optimized again: I/O moves to another path while it is, no error",
    "controller-reset": "the NVMe controller of the path carrying the I/O reset under I/O (nvme reset: its queues "
    "torn down and connected again): I/O goes on, no error",
    "session-relogin": "the iSCSI session of the path carrying the I/O logged out and in again under I/O (iscsiadm: "
    "its disk leaves the dm-multipath map, a new one joins it): I/O goes on, no error",
    "target-restart": "the target restarted under I/O, on every path at once, for as long as the brief outage "
    "(nvmet: its ports unlinked and linked again; SPDK: nvmf_tgt stopped and started again from its saved "
    "configuration; LIO: its TPGs disabled and enabled; SCST: the target disabled, its "
    "sessions closed, enabled; tgt: the target offline, its connections closed, ready): I/O waits, resumes, no error",
    "path-flapping": "the path carrying the I/O down and back failover.flap_cycles times in a row under one run, "
    "its failback watched between: every cycle moves the I/O to a remaining path while it is down, no error",
}
"""The failover suite's outages (issue 13, faults a to e) by name: the name is the case's last id part and its
key in the lab's ``thresholds`` table (``thresholds."*".all-paths-down-brief: {max_stall_s: 10}``)."""
BRIEF, LONG, ONE_PATH, ANA, PORT, ALUA, RESET, RELOGIN, RESTART, FLAPPING = OUTAGES
LONG_QUEUED = (
    "every path down for longer than the path timeout on hosts that queue with no path left "
    "(failover.long_outage: queue), then back: I/O waits, resumes and verifies, no error"
)
"""What the long outage is on a lab that chose queue-forever (its case keeps the long outage's name)."""
TARGET_OUTAGES = (ANA, PORT, ALUA)
"""The outages made on the target (one port's state or the port itself), not on the initiators' links."""
PARITY = "path-parity"
"""The path parity case's name (:mod:`pytest_fabricqa.failover.parity`): its key in the lab's ``thresholds`` table, where
``max_path_imbalance_pct`` applies (``thresholds."*".path-parity: {max_path_imbalance_pct: 10}``)."""

"""A target provisioned and every initiator connected to it, as one fabric; a killed run's leftovers cleaned;
prerequisites, queue settings, the kernel log and the lab lock on the hosts."""

"""The vocabulary every layer shares: errors, protocol facts, target kinds and failover case names, metrics, workloads,
the undo stack, an export, a command's result. Imports nothing of the plugin."""

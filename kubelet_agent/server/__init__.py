"""The kubelet HTTP API (logs, exec, attach, port-forward, stats)."""

"""NodePorts: a pod's host ports must be free on the node (0.0.0.0 conflicts with every address)."""

from scheduler.plugins.nodeports.node_ports import ERR_REASON, NodePorts

__all__ = ["ERR_REASON", "NodePorts"]

"""NodeName: a pod that names its node (`spec.nodeName`) fits only that node."""

from scheduler.plugins.nodename.node_name import ERR_REASON, NodeName

__all__ = ["ERR_REASON", "NodeName"]

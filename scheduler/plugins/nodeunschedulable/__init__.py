"""NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods tolerating the cordon taint."""

from scheduler.plugins.nodeunschedulable.node_unschedulable import (
    ERR_REASON_UNKNOWN_CONDITION,
    ERR_REASON_UNSCHEDULABLE,
    NodeUnschedulable,
)

__all__ = ["ERR_REASON_UNKNOWN_CONDITION", "ERR_REASON_UNSCHEDULABLE", "NodeUnschedulable"]

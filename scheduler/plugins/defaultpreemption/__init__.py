"""DefaultPreemption: evict lower-priority pods so a pending pod fits, like upstream's PostFilter."""

from scheduler.plugins.defaultpreemption.default_preemption import DefaultPreemption, pick_one_node_for_preemption

__all__ = ["DefaultPreemption", "pick_one_node_for_preemption"]

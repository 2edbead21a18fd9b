"""SchedulingGates: a pod with `spec.schedulingGates` waits outside activeQ until they are all removed."""

from scheduler.plugins.schedulinggates.scheduling_gates import SchedulingGates

__all__ = ["SchedulingGates"]

"""PrioritySort: higher `spec.priority` first, then the pod that entered the queue earlier."""

from scheduler.plugins.queuesort.priority_sort import PrioritySort

__all__ = ["PrioritySort"]

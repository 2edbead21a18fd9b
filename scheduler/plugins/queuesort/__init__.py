"""PrioritySort: higher `spec.priority` first, then the pod that entered the queue earlier."""

from __future__ import annotations

from scheduler.framework.interface import Plugin, QueuedPodInfo, pod_priority


class PrioritySort(Plugin):
    name = "PrioritySort"

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        pa, pb = pod_priority(a.pod), pod_priority(b.pod)
        return pa > pb or (pa == pb and (a.timestamp, a.seq) < (b.timestamp, b.seq))

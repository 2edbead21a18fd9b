"""PrioritySort: higher `spec.priority` first, then the pod that entered the queue earlier."""

from __future__ import annotations

from typing import Any

from scheduler.framework.interface import Plugin
from scheduler.framework.types import QueuedPodInfo, pod_priority


class PrioritySort(Plugin):
    name = "PrioritySort"

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        pa, pb = pod_priority(a.pod), pod_priority(b.pod)
        return pa > pb or (pa == pb and (a.timestamp, a.seq) < (b.timestamp, b.seq))

    def sort_key(self, qp: QueuedPodInfo) -> Any:
        return (-pod_priority(qp.pod), qp.timestamp, qp.seq)

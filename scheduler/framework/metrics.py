"""The scheduler's Prometheus metrics, named as upstream's (scheduler_ subsystem)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
_SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))

SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, "
    "while 'error' means an internal scheduler problem.",
    ["result", "profile"],
)
SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ["result", "profile"],
    buckets=_ATTEMPT_BUCKETS,
)
SCHEDULING_ALGORITHM_DURATION = Histogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds",
    buckets=_ATTEMPT_BUCKETS,
)
POD_SCHEDULING_SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue "
    "and might involve multiple scheduling attempts.",
    ["attempts"],
    buckets=_SLI_BUCKETS,
)
POD_SCHEDULING_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts",
    "Number of attempts to successfully schedule a pod.",
    buckets=(1, 2, 4, 8, 16),
)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means "
    "number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the "
    "scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the "
    "scheduler never attempted to schedule because they are gated.",
    ["queue"],
)
QUEUE_INCOMING_PODS = Counter(
    "scheduler_queue_incoming_pods_total",
    "Number of pods added to scheduling queues by event and queue type.",
    ["queue", "event"],
)
CACHE_SIZE = Gauge("scheduler_cache_size", "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
                   ["type"])

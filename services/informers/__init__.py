"""Reflectors, caches, shared informers, work queues and leader election: the controller toolkit."""

from services.informers.informer import (
    HandlerRegistration,
    Informer,
    SharedInformerFactory,
    Transform,
    strip_managed_fields,
)
from services.informers.leaderelection import LeaderElector, micro_time
from services.informers.reflector import Reflector
from services.informers.store import (
    BUILTIN_INDEXERS,
    LABEL_INDEX,
    NAMESPACE_INDEX,
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    Store,
    meta_namespace_key,
    split_key,
)
from services.informers.workqueue import (
    BucketRateLimiter,
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    RateLimitingQueue,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
)

__all__ = [
    "BUILTIN_INDEXERS",
    "LABEL_INDEX",
    "NAMESPACE_INDEX",
    "NODE_NAME_INDEX",
    "OWNER_UID_INDEX",
    "BucketRateLimiter",
    "DelayingQueue",
    "HandlerRegistration",
    "Informer",
    "ItemExponentialFailureRateLimiter",
    "LeaderElector",
    "MaxOfRateLimiter",
    "RateLimiter",
    "RateLimitingQueue",
    "Reflector",
    "SharedInformerFactory",
    "ShutDown",
    "Store",
    "Transform",
    "WorkQueue",
    "default_controller_rate_limiter",
    "meta_namespace_key",
    "micro_time",
    "split_key",
    "strip_managed_fields",
]

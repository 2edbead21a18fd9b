"""Cluster events plugins register for, and the queueing hints that filter them.

Upstream's ClusterEvent, ActionType and QueueingHint (`framework/types.go`, `framework/events.go`);
EventResource stands for upstream's GVK strings.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.framework.types import Obj


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATIONS = 512
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1024
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 2048
    UPDATE_OTHER = 4096
    UPDATE = (UPDATE_NODE_ALLOCATABLE | UPDATE_NODE_LABEL | UPDATE_NODE_TAINT | UPDATE_NODE_CONDITION
              | UPDATE_NODE_ANNOTATION | UPDATE_POD_LABEL | UPDATE_POD_SCALE_DOWN | UPDATE_POD_TOLERATIONS
              | UPDATE_POD_SCHEDULING_GATES_ELIMINATED | UPDATE_POD_GENERATED_RESOURCE_CLAIM | UPDATE_OTHER)
    ALL = ADD | DELETE | UPDATE


class EventResource(enum.StrEnum):
    POD = "Pod"
    # An assigned pod (spec.nodeName set) vs one still waiting: upstream splits them the same way.
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnschedulablePod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    STORAGE_CLASS = "StorageClass"
    CSI_NODE = "CSINode"
    CSI_DRIVER = "CSIDriver"
    CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
    VOLUME_ATTACHMENT = "VolumeAttachment"
    WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: EventResource
    action_type: ActionType
    label: str = ""

    def matches(self, incoming: ClusterEvent) -> bool:
        """Does a registered event (self) cover an incoming one? Wildcards match everything."""
        if self.resource == EventResource.WILDCARD:
            return True
        res_ok = self.resource == incoming.resource or (
            self.resource == EventResource.POD
            and incoming.resource in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD))
        return res_ok and bool(self.action_type & incoming.action_type)

    def __str__(self) -> str:
        return self.label or f"{self.resource}{self.action_type.name or int(self.action_type)}"


class QueueingHint(enum.IntEnum):
    QUEUE_SKIP = 0
    QUEUE = 1


# (pod waiting, old object or None, new object or None) -> whether the event may make it schedulable.
QueueingHintFn = Callable[[Obj, Obj | None, Obj | None], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHintFn | None = None

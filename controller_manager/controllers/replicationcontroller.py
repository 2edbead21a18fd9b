"""ReplicationController controller: the replica manager over v1 ReplicationControllers."""

from __future__ import annotations

from controller_manager.context import ControllerContext
from controller_manager.replica_manager import ReplicaSetController
from controller_manager.resources import REPLICATION_CONTROLLERS

NAME = "replicationcontroller"


def new(ctx: ControllerContext) -> ReplicaSetController:
    return ReplicaSetController(
        ctx, REPLICATION_CONTROLLERS, "ReplicationController", "replication-controller",
        int(ctx.options.concurrent_rc_syncs),
    )

"""ReplicaSet controller: the replica manager over apps/v1 ReplicaSets."""

from __future__ import annotations

from controller_manager.context import ControllerContext
from controller_manager.replica_manager import ReplicaSetController
from controller_manager.resources import REPLICA_SETS

NAME = "replicaset"


def new(ctx: ControllerContext) -> ReplicaSetController:
    return ReplicaSetController(
        ctx, REPLICA_SETS, "ReplicaSet", "replicaset-controller", int(ctx.options.concurrent_replicaset_syncs)
    )

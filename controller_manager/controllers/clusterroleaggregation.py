"""ClusterRole aggregation: a ClusterRole with an `aggregationRule` gets as its rules the union of
the rules of every other ClusterRole its `clusterRoleSelectors` match, in upstream's order
(selector by selector, matching roles by name, rules in their order, duplicates dropped).
Any ClusterRole change re-syncs every aggregated role, as upstream does.
"""

from __future__ import annotations

from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from services.api.validation import selector_matches
from services.client import NotFound, gvr

NAME = "clusterrole-aggregation"
FIELD_MANAGER = "clusterrole-aggregation-controller"
WORKERS = 5

CLUSTER_ROLES = gvr("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> ClusterRoleAggregationController:
    return ClusterRoleAggregationController(ctx)


def _norm(rule: Obj) -> Obj:
    """A rule with empty fields dropped: upstream's semantic equality treats nil and empty alike."""
    return {k: v for k, v in rule.items() if v not in (None, "", [], {})}


def aggregate(role: Obj, roles: list[Obj]) -> list[Obj]:
    """The rules `role` aggregates from `roles` (itself excluded)."""
    name = role["metadata"]["name"]
    out: list[Obj] = []
    seen: list[Obj] = []
    for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []:
        matching = sorted((r for r in roles if r["metadata"]["name"] != name
                           and selector_matches(selector, r["metadata"].get("labels"))),
                          key=lambda r: r["metadata"]["name"])
        for other in matching:
            for rule in other.get("rules") or []:
                normal = _norm(rule)
                if normal not in seen:
                    seen.append(normal)
                    out.append(rule)
    return out


def same_rules(a: list[Obj] | None, b: list[Obj] | None) -> bool:
    return [_norm(r) for r in a or []] == [_norm(r) for r in b or []]


class ClusterRoleAggregationController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.roles = ctx.informer(CLUSTER_ROLES)
        super().__init__(NAME, [self.roles], WORKERS)
        self.roles.add_event_handler(self._changed, lambda old, new: self._changed(new), self._changed)

    def _changed(self, _: Obj) -> None:
        """Any role may feed any aggregated role, so every aggregated role is looked at again."""
        for role in self.roles.list():
            if role.get("aggregationRule") is not None:
                self.queue.add(role["metadata"]["name"])

    async def sync(self, key: str) -> None:
        role = self.roles.get(key)
        if role is None or role.get("aggregationRule") is None:
            return
        rules = aggregate(role, self.roles.list())
        if same_rules(rules, role.get("rules")):
            return
        body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": key}, "rules": rules}
        try:
            await self.client.patch(CLUSTER_ROLES, key, body, patch_type="apply", field_manager=FIELD_MANAGER,
                                    force=True)
        except NotFound:
            return

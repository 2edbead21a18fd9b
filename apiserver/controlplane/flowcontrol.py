"""The API Priority and Fairness bootstrap configuration, kept as upstream's APF config controller keeps it.

At start every apiserver makes sure the mandatory FlowSchemas and PriorityLevelConfigurations exist with
upstream's spec (`exempt`, `catch-all`) and creates the suggested ones that are missing. An object whose
`apf.kubernetes.io/autoupdate-spec` annotation is "true" (what the bootstrap writes) gets its spec put back
when it drifts; users opt out by setting it to "false". Each FlowSchema's `Dangling` condition says
whether the priority level it names exists, which is what `kubectl get flowschemas` shows as MISSINGPL.
The objects are only configuration here: requests are not classified or limited by them.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import structlog

from apiserver.registry.store import ListOptions, RESTStore, WriteOptions
from services.api import errors
from services.api.meta import now_rfc3339

log = structlog.get_logger("apiserver.flowcontrol")

Obj = dict[str, Any]
AUTOUPDATE = "apf.kubernetes.io/autoupdate-spec"
RESYNC_SECONDS = 10.0

_ALL_NON_RESOURCES = {"verbs": ["*"], "nonResourceURLs": ["*"]}
_EVERYONE = ("system:unauthenticated", "system:authenticated")


def _groups(*names: str) -> list[Obj]:
    return [{"kind": "Group", "group": {"name": n}} for n in names]


def _users(*names: str) -> list[Obj]:
    return [{"kind": "User", "user": {"name": n}} for n in names]


def _kube_system_accounts(*names: str) -> list[Obj]:
    return [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": n}} for n in names]


def _rule(verbs: list[str], groups: list[str], resources: list[str], namespaces: list[str],
          cluster_scope: bool = False) -> Obj:
    rule: Obj = {"verbs": verbs, "apiGroups": groups, "resources": resources}
    if cluster_scope:
        rule["clusterScope"] = True
    rule["namespaces"] = namespaces
    return rule


def _everything(subjects: list[Obj]) -> Obj:
    return {"subjects": subjects, "resourceRules": [_rule(["*"], ["*"], ["*"], ["*"], cluster_scope=True)],
            "nonResourceRules": [_ALL_NON_RESOURCES]}


def _flow_schema(name: str, level: str, precedence: int, method: str, *rules: Obj) -> Obj:
    spec: Obj = {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence}
    if method:
        spec["distinguisherMethod"] = {"type": method}
    spec["rules"] = list(rules)
    return {"metadata": {"name": name}, "spec": spec}


def _limited(name: str, shares: int, lendable: int, queuing: tuple[int, int, int] | None) -> Obj:
    response: Obj = {"type": "Reject"}
    if queuing is not None:
        queues, hand, length = queuing
        response = {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length}}
    return {"metadata": {"name": name}, "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": shares, "lendablePercent": lendable, "limitResponse": response}}}


_LEADER_ELECTION_VERBS = ["get", "create", "update"]

MANDATORY_PRIORITY_LEVELS: tuple[Obj, ...] = (
    _limited("catch-all", 5, 0, None),
    {"metadata": {"name": "exempt"},
     "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}},
)
SUGGESTED_PRIORITY_LEVELS: tuple[Obj, ...] = (
    _limited("system", 30, 33, (64, 6, 50)),
    _limited("node-high", 40, 25, (64, 6, 50)),
    _limited("leader-election", 10, 0, (16, 4, 50)),
    _limited("workload-high", 40, 50, (128, 6, 50)),
    _limited("workload-low", 100, 90, (128, 6, 50)),
    _limited("global-default", 20, 50, (128, 6, 50)),
)
MANDATORY_FLOW_SCHEMAS: tuple[Obj, ...] = (
    _flow_schema("exempt", "exempt", 1, "", _everything(_groups("system:masters"))),
    _flow_schema("catch-all", "catch-all", 10000, "ByUser", _everything(_groups(*_EVERYONE))),
)
SUGGESTED_FLOW_SCHEMAS: tuple[Obj, ...] = (
    _flow_schema("system-nodes", "system", 500, "ByUser", _everything(_groups("system:nodes"))),
    _flow_schema("system-node-high", "node-high", 400, "ByUser", {
        "subjects": _groups("system:nodes"), "resourceRules": [
            _rule(["*"], [""], ["nodes", "nodes/status"], ["*"], cluster_scope=True),
            _rule(["*"], ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _flow_schema("probes", "exempt", 2, "", {
        "subjects": _groups(*_EVERYONE),
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}),
    _flow_schema("system-leader-election", "leader-election", 100, "ByUser", {
        "subjects": [*_users("system:kube-controller-manager", "system:kube-scheduler"), *_kube_system_accounts("*")],
        "resourceRules": [_rule(_LEADER_ELECTION_VERBS, ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _flow_schema("workload-leader-election", "leader-election", 200, "ByUser", {
        "subjects": _kube_system_accounts("*"),
        "resourceRules": [_rule(_LEADER_ELECTION_VERBS, [""], ["endpoints", "configmaps"], ["*"]),
                          _rule(_LEADER_ELECTION_VERBS, ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _flow_schema("endpoint-controller", "workload-high", 150, "ByUser", {
        "subjects": [*_users("system:kube-controller-manager"),
                     *_kube_system_accounts("endpoint-controller", "endpointslicemirroring-controller")],
        "resourceRules": [_rule(_LEADER_ELECTION_VERBS, [""], ["endpoints"], ["*"])]}),
    _flow_schema("kube-controller-manager", "workload-high", 800, "ByNamespace",
                 _everything(_users("system:kube-controller-manager"))),
    _flow_schema("kube-scheduler", "workload-high", 800, "ByNamespace", _everything(_users("system:kube-scheduler"))),
    _flow_schema("kube-system-service-accounts", "workload-high", 900, "ByNamespace",
                 _everything(_kube_system_accounts("*"))),
    _flow_schema("service-accounts", "workload-low", 9000, "ByUser", _everything(_groups("system:serviceaccounts"))),
    _flow_schema("global-default", "global-default", 9900, "ByUser", _everything(_groups(*_EVERYONE))),
)


def _with_autoupdate(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"] = {AUTOUPDATE: "true"}
    return out


def _wanted_spec(current: Obj, wanted: Obj, mandatory: bool) -> Obj | None:
    """The spec to write back, or None to leave `current` as it is.

    Mandatory objects are always put back, except the exempt level's tunable shares; suggested ones only
    while their autoupdate annotation is "true".
    """
    if not mandatory and ((current.get("metadata") or {}).get("annotations") or {}).get(AUTOUPDATE) != "true":
        return None
    spec = copy.deepcopy(wanted["spec"])
    if mandatory and spec.get("type") == "Exempt":
        spec["exempt"] = {**spec["exempt"], **((current.get("spec") or {}).get("exempt") or {})}
    return None if current.get("spec") == spec else spec


async def _ensure(store: RESTStore, wanted: Obj, mandatory: bool) -> None:
    name = wanted["metadata"]["name"]
    try:
        current = await store.get(None, name)
    except errors.StatusError as exc:
        if exc.code != 404:
            raise
        try:
            await store.create(None, _with_autoupdate(wanted), WriteOptions())
        except errors.StatusError as race:
            if race.code != 409:
                raise
        return
    spec = _wanted_spec(current, wanted, mandatory)
    if spec is None:
        return

    def put_back(obj: Obj) -> Obj:
        obj["spec"] = spec
        return obj

    await store.mutate(None, name, put_back, WriteOptions())
    log.info("flowcontrol configuration put back", kind=store.res.kind, name=name)


async def ensure_bootstrap_configuration(flow_schemas: RESTStore, priority_levels: RESTStore) -> None:
    """Create or correct the mandatory objects and create the missing suggested ones."""
    for obj in MANDATORY_PRIORITY_LEVELS:
        await _ensure(priority_levels, obj, True)
    for obj in SUGGESTED_PRIORITY_LEVELS:
        await _ensure(priority_levels, obj, False)
    for obj in MANDATORY_FLOW_SCHEMAS:
        await _ensure(flow_schemas, obj, True)
    for obj in SUGGESTED_FLOW_SCHEMAS:
        await _ensure(flow_schemas, obj, False)


def dangling_condition(level: str, exists: bool) -> Obj:
    """Upstream's Dangling condition, without its transition time."""
    if exists:
        return {"type": "Dangling", "status": "False", "reason": "Found",
                "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
                           "and it exists"}
    return {"type": "Dangling", "status": "True", "reason": "NotFound",
            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" but '
                       "there is no such object"}


async def update_flow_schema_status(flow_schemas: RESTStore, priority_levels: RESTStore) -> None:
    """Give every FlowSchema whose Dangling condition is missing or stale the one it has now."""
    levels = {_name(e) for e in (await priority_levels.list(None, ListOptions()))[0]}
    for entry in (await flow_schemas.list(None, ListOptions()))[0]:
        schema = _obj(entry)
        level = ((schema.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name") or ""
        wanted = dangling_condition(level, level in levels)
        conditions = (schema.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "Dangling"), None)
        if current is not None and all(current.get(k) == wanted[k] for k in ("status", "reason", "message")):
            continue

        def set_condition(obj: Obj, wanted: Obj = wanted) -> Obj:
            if not isinstance(obj.get("status"), dict):
                obj["status"] = {}
            status = obj["status"]
            old = [c for c in status.get("conditions") or [] if c.get("type") != "Dangling"]
            status["conditions"] = [*old, {**wanted, "lastTransitionTime": now_rfc3339()}]
            return obj

        try:
            await flow_schemas.mutate(None, schema["metadata"]["name"], set_condition, WriteOptions(), "status")
        except errors.StatusError as exc:
            if exc.code != 404:
                raise


def _obj(entry: Any) -> Obj:
    return entry.obj if hasattr(entry, "obj") else entry


def _name(entry: Any) -> str:
    return str(_obj(entry)["metadata"]["name"])


async def status_loop(flow_schemas: RESTStore, priority_levels: RESTStore) -> None:
    """Keep the Dangling conditions current; runs for the apiserver's life."""
    while True:
        try:
            await update_flow_schema_status(flow_schemas, priority_levels)
        except Exception:  # noqa: BLE001 - retried next round; one bad object must not stop the others
            log.exception("flowschema status update failed")
        await asyncio.sleep(RESYNC_SECONDS)

"""Pods: defaults (including what the ServiceAccount, Priority and DefaultTolerationSeconds
admission plugins add), validation, update rules, field selectors, graceful deletion
and the pods/binding subresource."""

from __future__ import annotations

from datetime import UTC, datetime

from apiserver.registry import podspec
from apiserver.registry.base import MetaStrategy, child, get
from apiserver.registry.strategy import Cause, Obj
from services.api import errors
from services.api import validation as v


class PodStrategy(MetaStrategy):
    graceful = True

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        podspec.default_pod_spec(spec)
        podspec.default_pod_only(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": podspec.qos_class(obj.get("spec") or {})}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return podspec.validate_pod_spec(obj.get("spec"), "spec", is_pod=True)

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return podspec.validate_pod_spec_update(new.get("spec") or {}, old.get("spec") or {})

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = v.validate_object_meta_update(new.get("metadata"), old.get("metadata"))
        old_node = get(old, "spec", "nodeName", default="")
        new_node = get(new, "status", "nominatedNodeName", default="")
        if new_node:
            causes.extend(v.invalid("status.nominatedNodeName", new_node, m) for m in v.is_dns1123_subdomain(new_node))
        if old_node and get(old, "status", "phase") in ("Succeeded", "Failed"):
            new_phase = get(new, "status", "phase")
            if new_phase != get(old, "status", "phase"):
                causes.append(v.forbidden("status.phase", "cannot transition from terminal phase"))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        pod_ip = status.get("podIP") or ""
        if not pod_ip and status.get("podIPs"):
            pod_ip = status["podIPs"][0].get("ip", "")
        fields.update({
            "spec.nodeName": spec.get("nodeName") or "",
            "spec.restartPolicy": spec.get("restartPolicy") or "",
            "spec.schedulerName": spec.get("schedulerName") or "",
            "spec.serviceAccountName": spec.get("serviceAccountName") or "",
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": status.get("phase") or "",
            "status.podIP": pod_ip,
            "status.nominatedNodeName": status.get("nominatedNodeName") or "",
        })
        return fields

    def grace_period(self, obj: Obj, requested: int | None) -> int:
        """The request wins over spec; unbound and terminal pods go at once; negative means 1."""
        spec = obj.get("spec") or {}
        period = spec.get("terminationGracePeriodSeconds") or 0
        if requested is not None:
            period = requested
        if not spec.get("nodeName"):
            return 0
        if get(obj, "status", "phase") in ("Succeeded", "Failed"):
            return 0
        if period < 0:
            return 1
        return period


def validate_binding(binding: Obj) -> list[Cause]:
    target = binding.get("target") or {}
    causes: list[Cause] = []
    if not target.get("name"):
        causes.append(v.required("target.name"))
    kind = target.get("kind") or ""
    if kind not in ("", "Node"):
        causes.append(v.not_supported("target.kind", kind, ("Node", "<empty>")))
    return causes


def bind(pod: Obj, binding: Obj, now: datetime | None = None) -> Obj:
    """The pod after a pods/binding create: nodeName set, binding annotations merged, PodScheduled true.

    Raises 422 for an invalid binding and 409 when the pod is being deleted or already bound.
    """
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    causes = validate_binding(binding)
    if causes:
        raise errors.invalid("Binding", "", get(binding, "metadata", "name", default=name), causes)
    if meta.get("deletionTimestamp"):
        raise errors.conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
    node = get(pod, "spec", "nodeName", default="")
    if node:
        raise errors.conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{node}"')
    # Copy only what changes: the pod is left as it was, and most of it is shared with the result.
    bound = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": binding["target"]["name"]}}
    extra = get(binding, "metadata", "annotations") or {}
    if extra:
        bound["metadata"] = {**meta, "annotations": {**(meta.get("annotations") or {}), **extra}}
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = bound["status"] = dict(pod.get("status") or {})
    conditions = status["conditions"] = list(status.get("conditions") or [])
    for i, cond in enumerate(conditions):
        if cond.get("type") == "PodScheduled":
            cond = conditions[i] = {k: v for k, v in cond.items() if k not in ("reason", "message")}
            if cond.get("status") != "True":
                cond.update({"status": "True", "lastTransitionTime": stamp})
            break
    else:
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": stamp})
    return bound

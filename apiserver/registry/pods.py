"""Pods: defaults, validation, update rules, field selectors, graceful deletion, the pods/binding
subresource and the pods/ephemeralcontainers subresource. What admission adds to pods (service
account, priority, default tolerations) is in apiserver/admission/."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from apiserver.registry import podspec
from apiserver.registry.base import MetaStrategy, child, get
from apiserver.registry.strategy import Cause, Obj
from services.api import errors
from services.api import validation as v

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class PodStrategy(MetaStrategy):
    graceful = True
    # Old kubelets corrupted owner references through pods/status, so upstream keeps the old ones.
    status_resets_metadata = ("ownerReferences",)

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        podspec.default_pod_spec(spec)
        podspec.default_pod_only(spec)
        for container in spec.get("ephemeralContainers") or []:
            if isinstance(container, dict):
                podspec.default_container(container)

    def validate(self, obj: Obj) -> list[Cause]:
        causes = super().validate(obj)
        if get(obj, "spec", "ephemeralContainers"):
            causes.append(v.forbidden("spec.ephemeralContainers", "cannot be set on create"))
        return causes

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "qosClass": podspec.qos_class(obj.get("spec") or {})}
        if get(obj, "spec", "schedulingGates"):
            # As upstream's applySchedulingGatedCondition: the scheduler never sees a gated pod, so the
            # apiserver says why it waits (what `kubectl get pods` prints as SchedulingGated).
            obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                            "message": "Scheduling is blocked due to non-empty scheduling gates"}]

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


#: EphemeralContainer fields upstream refuses (everything its allow list leaves out), in field order.
EPHEMERAL_FORBIDDEN_FIELDS = ("ports", "resources", "resizePolicy", "restartPolicy", "livenessProbe",
                              "readinessProbe", "startupProbe", "lifecycle")
EPHEMERAL_FORBIDDEN = "cannot be set for an Ephemeral Container"


def validate_ephemeral_containers(spec: Obj) -> list[Cause]:
    """Upstream's validateEphemeralContainers: names unique across all containers, the target a
    regular or init container, and none of the fields that would make it part of the workload."""
    causes: list[Cause] = []
    others = {c.get("name") for key in ("containers", "initContainers") for c in spec.get(key) or []
              if isinstance(c, dict)}
    names = set(others)
    volumes = {vol.get("name") for vol in spec.get("volumes") or [] if isinstance(vol, dict)}
    for i, container in enumerate(spec.get("ephemeralContainers") or []):
        path = f"spec.ephemeralContainers[{i}]"
        if not isinstance(container, dict):
            causes.append(v.required(path))
            continue
        name = container.get("name") or ""
        if not name:
            causes.append(v.required(f"{path}.name"))
        else:
            causes.extend(v.invalid(f"{path}.name", name, m) for m in v.is_dns1123_label(name))
        causes.extend(podspec.validate_container(container, path, volumes, True))
        if name in names:
            causes.append(v.duplicate(f"{path}.name", name))
        names.add(name)
        target = container.get("targetContainerName") or ""
        if target and target not in others:
            causes.append(v.not_found(f"{path}.targetContainerName", target))
        for key in EPHEMERAL_FORBIDDEN_FIELDS:
            value = container.get(key)
            if key == "resources" and isinstance(value, dict):
                value = {k: val for k, val in value.items() if val}
            if value not in (None, [], {}):
                causes.append(v.forbidden(f"{path}.{key}", EPHEMERAL_FORBIDDEN))
        for j, mount in enumerate(container.get("volumeMounts") or []):
            for key in ("subPath", "subPathExpr"):
                if isinstance(mount, dict) and mount.get(key):
                    causes.append(v.forbidden(f"{path}.volumeMounts[{j}].{key}", EPHEMERAL_FORBIDDEN))
    return causes


def _changes(old: Obj, new: Obj) -> str:
    """A short account of what differs between two versions of an ephemeral container."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines.append(f"  {key}: {old.get(key)!r} -> {new.get(key)!r}")
    return "\n".join(lines)


def validate_ephemeral_update(new: Obj, old: Obj) -> list[Cause]:
    """Upstream's ValidatePodEphemeralContainersUpdate: the pod stays valid, and existing ephemeral
    containers are neither removed nor changed (matched by name: patches may reorder the list)."""
    if MIRROR_ANNOTATION in (get(old, "metadata", "annotations") or {}):
        return [v.forbidden("", "static pods do not support ephemeral containers")]
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes = v.validate_object_meta_update(new.get("metadata"), old.get("metadata"))
    causes += podspec.validate_pod_spec(spec, "spec", is_pod=True)
    causes += validate_ephemeral_containers(spec)
    index = {c.get("name"): c for c in spec.get("ephemeralContainers") or [] if isinstance(c, dict)}
    for before in old_spec.get("ephemeralContainers") or []:
        name = before.get("name", "")
        after = index.get(name)
        if after is None:
            causes.append(v.forbidden("spec.ephemeralContainers",
                                      f'existing ephemeral containers "{name}" may not be removed\n'))
        elif after != before:
            causes.append(v.forbidden("spec.ephemeralContainers", f'existing ephemeral containers "{name}" may not '
                                      f"be changed\n{_changes(before, after)}"))
    return causes


def update_ephemeral_containers(pod: Obj, wanted: Any) -> Obj:
    """The pod after a write to pods/ephemeralcontainers: only spec.ephemeralContainers is taken from
    `wanted` (upstream's dropNonEphemeralContainerUpdates); raises 422 when the result is invalid."""
    name = get(pod, "metadata", "name", default="")
    if not isinstance(wanted, dict):
        raise errors.bad_request("a Pod object is required")
    containers = get(wanted, "spec", "ephemeralContainers")
    new = copy.deepcopy(pod)
    spec = new.setdefault("spec", {})
    if containers:
        spec["ephemeralContainers"] = copy.deepcopy(containers)
    else:
        spec.pop("ephemeralContainers", None)
    for container in spec.get("ephemeralContainers") or []:
        if isinstance(container, dict):
            podspec.default_container(container)
    causes = validate_ephemeral_update(new, pod)
    if causes:
        raise errors.invalid("Pod", "", name, causes)
    return new


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

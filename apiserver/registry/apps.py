"""Workload controllers: Deployment, ReplicaSet, StatefulSet, DaemonSet (apps/v1) and the
core ReplicationController. They share selector/template rules and generation tracking."""

from __future__ import annotations

import copy
import re
from typing import Any

from apiserver.registry.base import GenerationStrategy, MetaStrategy, child, get, setdefault
from apiserver.registry.podspec import default_pod_template, validate_pod_template
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

SELECTOR_MISMATCH = "`selector` does not match template `labels`"
_PERCENT = re.compile(r"^[0-9]+%$")


def validate_int_or_percent(value: Any, path: str) -> list[Cause]:
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [v.invalid(path, value, "a valid percent string must be a numeric string followed by an ending "
                                            "'%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]
        if int(value[:-1]) > 100:
            return [v.invalid(path, value, "must not be greater than 100%")]
        return []
    return v.validate_nonnegative(value, path)


def _is_zero(value: Any) -> bool:
    return value in (0, "0%", None)


class _WorkloadStrategy(GenerationStrategy):
    """A controller with spec.selector (metav1.LabelSelector), spec.template and spec.replicas."""

    has_replicas = True
    #: apps/v1 selectors never change after create.
    immutable_selector = True

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        if self.has_replicas:
            setdefault(spec, "replicas", 1)
        default_pod_template(spec.get("template"))

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        if self.has_replicas:
            causes.extend(v.validate_nonnegative(spec.get("replicas"), "spec.replicas"))
        causes.extend(v.validate_nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"))
        causes.extend(v.validate_nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit"))
        selector = spec.get("selector")
        template = spec.get("template")
        if selector is None:
            causes.append(v.required("spec.selector"))
        else:
            causes.extend(v.validate_label_selector(selector, "spec.selector"))
            if not selector.get("matchLabels") and not selector.get("matchExpressions"):
                causes.append(v.invalid("spec.selector", selector,
                                        f"empty selector is invalid for {self.resource.singular}"))
        if template is None:
            causes.append(v.required("spec.template"))
            return causes
        labels = get(template, "metadata", "labels", default={})
        if selector and not v.selector_matches(selector, labels):
            causes.append(v.invalid("spec.template.metadata.labels", labels, SELECTOR_MISMATCH))
        causes.extend(validate_pod_template(template, "spec.template", self.claim_volumes(spec)))
        restart = get(template, "spec", "restartPolicy")
        if restart is not None and restart != "Always":
            causes.append(v.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
        if get(template, "spec", "activeDeadlineSeconds") is not None:
            causes.append(v.forbidden("spec.template.spec.activeDeadlineSeconds",
                                      f"activeDeadlineSeconds in {self.resource.kind} is not Supported"))
        return causes

    def claim_volumes(self, spec: Obj) -> list[str]:
        """Volumes the controller adds to each pod, which the template's mounts may name."""
        return []

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        if self.immutable_selector:
            causes.extend(v.validate_immutable(get(new, "spec", "selector"), get(old, "spec", "selector"),
                                               "spec.selector"))
        return causes


class DeploymentStrategy(_WorkloadStrategy):
    status_resets_metadata = ("labels",)

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        strategy = child(spec, "strategy")
        setdefault(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = child(strategy, "rollingUpdate")
            setdefault(rolling, "maxUnavailable", "25%")
            setdefault(rolling, "maxSurge", "25%")
        setdefault(spec, "revisionHistoryLimit", 10)
        setdefault(spec, "progressDeadlineSeconds", 600)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes = super().validate_spec(obj)
        spec = obj.get("spec") or {}
        strategy = spec.get("strategy") or {}
        kind = strategy.get("type") or ""
        if kind not in ("Recreate", "RollingUpdate"):
            causes.append(v.not_supported("spec.strategy.type", kind, ("Recreate", "RollingUpdate")))
        rolling = strategy.get("rollingUpdate")
        if kind == "Recreate" and rolling is not None:
            causes.append(v.forbidden("spec.strategy.rollingUpdate",
                                      "may not be specified when strategy `type` is 'Recreate'"))
        if kind == "RollingUpdate" and isinstance(rolling, dict):
            path = "spec.strategy.rollingUpdate"
            causes.extend(validate_int_or_percent(rolling.get("maxUnavailable"), f"{path}.maxUnavailable"))
            causes.extend(validate_int_or_percent(rolling.get("maxSurge"), f"{path}.maxSurge"))
            if _is_zero(rolling.get("maxUnavailable")) and _is_zero(rolling.get("maxSurge")):
                causes.append(v.invalid(f"{path}.maxUnavailable", rolling.get("maxUnavailable"),
                                        "may not be 0 when `maxSurge` is 0"))
        deadline = spec.get("progressDeadlineSeconds")
        if deadline is not None:
            causes.extend(v.validate_nonnegative(deadline, "spec.progressDeadlineSeconds"))
            min_ready = spec.get("minReadySeconds") or 0
            if deadline <= min_ready:
                causes.append(v.invalid("spec.progressDeadlineSeconds", deadline,
                                        "must be greater than minReadySeconds"))
        return causes


class ReplicaSetStrategy(_WorkloadStrategy):
    initial_status = {"replicas": 0}
    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["status.replicas"] = str(get(obj, "status", "replicas", default=0))
        return fields


class StatefulSetStrategy(_WorkloadStrategy):
    initial_status = {"replicas": 0, "availableReplicas": 0}
    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        setdefault(spec, "podManagementPolicy", "OrderedReady")
        strategy = child(spec, "updateStrategy")
        setdefault(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            setdefault(child(strategy, "rollingUpdate"), "partition", 0)
        setdefault(spec, "revisionHistoryLimit", 10)
        policy = child(spec, "persistentVolumeClaimRetentionPolicy")
        setdefault(policy, "whenDeleted", "Retain")
        setdefault(policy, "whenScaled", "Retain")
        for claim in spec.get("volumeClaimTemplates") or []:
            if isinstance(claim, dict):
                setdefault(child(claim, "spec"), "volumeMode", "Filesystem")
                claim.setdefault("status", {"phase": "Pending"})

    def claim_volumes(self, spec: Obj) -> list[str]:
        """Each claim template becomes a volume of that name in every pod (upstream's TODO in
        ValidatePodTemplateSpecForStatefulSet: mounts must name a volume or a claim template)."""
        claims = spec.get("volumeClaimTemplates")
        if not isinstance(claims, list):
            return []
        return [name for c in claims if isinstance(c, dict) and isinstance(name := get(c, "metadata", "name"), str)]

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes = super().validate_spec(obj)
        spec = obj.get("spec") or {}
        policy = spec.get("podManagementPolicy") or ""
        if policy not in ("OrderedReady", "Parallel"):
            causes.append(v.not_supported("spec.podManagementPolicy", policy, ("OrderedReady", "Parallel")))
        kind = get(spec, "updateStrategy", "type", default="")
        if kind not in ("OnDelete", "RollingUpdate"):
            causes.append(v.not_supported("spec.updateStrategy.type", kind, ("OnDelete", "RollingUpdate")))
        causes.extend(v.validate_nonnegative(get(spec, "updateStrategy", "rollingUpdate", "partition"),
                                             "spec.updateStrategy.rollingUpdate.partition"))
        for key in ("whenDeleted", "whenScaled"):
            value = get(spec, "persistentVolumeClaimRetentionPolicy", key, default="")
            if value not in ("Retain", "Delete"):
                causes.append(v.not_supported(f"spec.persistentVolumeClaimRetentionPolicy.{key}", value,
                                              ("Retain", "Delete")))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = super().validate_spec_update(new, old)
        mutable = ("replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                   "minReadySeconds")
        rest_new = {k: val for k, val in (new.get("spec") or {}).items() if k not in mutable}
        rest_old = {k: val for k, val in (old.get("spec") or {}).items() if k not in mutable}
        if rest_new != rest_old:
            causes.append(v.forbidden("spec", "updates to statefulset spec for fields other than 'replicas', "
                                              "'ordinals', 'template', 'updateStrategy', "
                                              "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' "
                                              "are forbidden"))
        return causes


class DaemonSetStrategy(_WorkloadStrategy):
    has_replicas = False
    initial_status = {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                      "numberReady": 0}

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj["spec"]
        strategy = child(spec, "updateStrategy")
        setdefault(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = child(strategy, "rollingUpdate")
            setdefault(rolling, "maxUnavailable", 1)
            setdefault(rolling, "maxSurge", 0)
        setdefault(spec, "revisionHistoryLimit", 10)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes = super().validate_spec(obj)
        strategy = get(obj, "spec", "updateStrategy", default={})
        kind = strategy.get("type") or ""
        if kind not in ("OnDelete", "RollingUpdate"):
            causes.append(v.not_supported("spec.updateStrategy.type", kind, ("OnDelete", "RollingUpdate")))
        rolling = strategy.get("rollingUpdate")
        if kind == "RollingUpdate" and isinstance(rolling, dict):
            path = "spec.updateStrategy.rollingUpdate"
            causes.extend(validate_int_or_percent(rolling.get("maxUnavailable"), f"{path}.maxUnavailable"))
            causes.extend(validate_int_or_percent(rolling.get("maxSurge"), f"{path}.maxSurge"))
            if _is_zero(rolling.get("maxUnavailable")) and _is_zero(rolling.get("maxSurge")):
                causes.append(v.invalid(f"{path}.maxUnavailable", rolling.get("maxUnavailable"),
                                        "may not be 0 when `maxSurge` is 0"))
        return causes


class ReplicationControllerStrategy(GenerationStrategy):
    """core/v1 RC: the selector is a plain map, defaulted (with the labels) from the template."""

    initial_status = {"replicas": 0}

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        labels = get(spec, "template", "metadata", "labels")
        if labels:
            if not spec.get("selector"):
                spec["selector"] = copy.deepcopy(labels)
            meta = child(obj, "metadata")
            if not meta.get("labels"):
                meta["labels"] = copy.deepcopy(labels)
        setdefault(spec, "replicas", 1)
        default_pod_template(spec.get("template"))

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes = v.validate_nonnegative(spec.get("replicas"), "spec.replicas")
        causes.extend(v.validate_nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"))
        selector = spec.get("selector") or {}
        if not selector:
            causes.append(v.required("spec.selector"))
        causes.extend(v.validate_labels(selector, "spec.selector"))
        template = spec.get("template")
        if template is None:
            causes.append(v.required("spec.template"))
            return causes
        labels = get(template, "metadata", "labels", default={})
        if selector and not v.selector_matches({"matchLabels": selector}, labels):
            causes.append(v.invalid("spec.template.metadata.labels", labels, SELECTOR_MISMATCH))
        causes.extend(validate_pod_template(template, "spec.template"))
        restart = get(template, "spec", "restartPolicy")
        if restart is not None and restart != "Always":
            causes.append(v.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["status.replicas"] = str(get(obj, "status", "replicas", default=0))
        return fields


class ControllerRevisionStrategy(MetaStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        return v.validate_nonnegative(obj.get("revision"), "revision")

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return self.validate_spec(new) + v.validate_immutable(new.get("data"), old.get("data"), "data")

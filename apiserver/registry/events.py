"""Events (core/v1 and events.k8s.io/v1, one storage) and Leases: create-on-update resources."""

from __future__ import annotations

from typing import Any

from apiserver.registry.base import MetaStrategy, get
from apiserver.registry.conversion import event_to_core
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

EVENT_TYPES = ("Normal", "Warning")
NOTE_LENGTH_LIMIT = 1024


def event_field_set(core: Obj, fields: dict[str, str]) -> dict[str, str]:
    involved = core.get("involvedObject") or {}
    source = get(core, "source", "component", default="") or core.get("reportingComponent") or ""
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
        fields[f"involvedObject.{key}"] = involved.get(key) or ""
    fields["reason"] = core.get("reason") or ""
    fields["reportingComponent"] = core.get("reportingComponent") or ""
    fields["source"] = source
    fields["type"] = core.get("type") or ""
    return fields


class EventStrategy(MetaStrategy):
    """core/v1 Event."""

    allow_create_on_update = True

    def ttl(self, ctx: Any) -> int:
        """Seconds every create and update keeps an event (the apiserver's --event-ttl), as upstream."""
        return int(ctx.event_ttl)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        if obj.get("reportingComponent") or obj.get("eventTime"):
            return _validate_new_event(obj)
        namespace = get(obj, "metadata", "namespace", default="")
        involved_ns = get(obj, "involvedObject", "namespace", default="")
        if (not involved_ns and namespace not in ("", "default")) or (involved_ns and involved_ns != namespace):
            return [v.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")]
        return []

    def field_set(self, obj: Obj) -> dict[str, str]:
        return event_field_set(obj, super().field_set(obj))


class EventsV1Strategy(MetaStrategy):
    """events.k8s.io/v1 Event: the new-style rules, field paths in this version's names."""

    allow_create_on_update = True
    ttl = EventStrategy.ttl

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return _validate_new_event(obj if "involvedObject" in obj else event_to_core(obj, shared=True))

    def field_set(self, obj: Obj) -> dict[str, str]:
        core = obj if "involvedObject" in obj else event_to_core(obj, shared=True)
        fields = event_field_set(core, super().field_set(obj))
        for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            fields[f"regarding.{key}"] = fields[f"involvedObject.{key}"]
        fields["reportingController"] = fields["reportingComponent"]
        fields["deprecatedSource"] = fields["source"]
        return fields


def _validate_new_event(core: Obj) -> list[Cause]:
    causes: list[Cause] = []
    if not core.get("eventTime"):
        causes.append(v.required("eventTime"))
    if not core.get("reportingComponent"):
        causes.append(v.required("reportingController"))
    else:
        causes.extend(v.invalid("reportingController", core["reportingComponent"], m)
                      for m in v.is_qualified_name(core["reportingComponent"]))
    instance = core.get("reportingInstance") or ""
    if not instance:
        causes.append(v.required("reportingInstance"))
    elif len(instance) > 128:
        causes.append(v.invalid("reportingInstance", "", "can have at most 128 characters"))
    action = core.get("action") or ""
    if not action:
        causes.append(v.required("action"))
    elif len(action) > 128:
        causes.append(v.invalid("action", "", "can have at most 128 characters"))
    reason = core.get("reason") or ""
    if not reason:
        causes.append(v.required("reason"))
    elif len(reason) > 128:
        causes.append(v.invalid("reason", "", "can have at most 128 characters"))
    event_type = core.get("type") or ""
    if event_type not in EVENT_TYPES:
        causes.append(v.invalid("type", event_type, "has invalid value: " + event_type))
    if len((core.get("message") or "").encode()) > NOTE_LENGTH_LIMIT:
        causes.append(v.too_long("note", NOTE_LENGTH_LIMIT))
    return causes


class LeaseStrategy(MetaStrategy):
    allow_create_on_update = True

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            causes.append(v.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and transitions < 0:
            causes.append(v.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
        return causes

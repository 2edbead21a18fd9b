"""Server-side apply and managedFields tracking, as upstream's fieldmanager and structured-merge-diff do.

Pure functions on plain dicts. `update_managed_fields` runs on every create, update and non-apply patch and
records who changed which fields; `apply` implements `application/apply-patch+yaml`: merge by schema, own
the applied fields, detect conflicts with other managers, and prune what the applier stopped setting.
"""

from __future__ import annotations

from typing import Any

import orjson

from services.api.errors import StatusError
from services.api.fieldmanager.fieldset import (
    InvalidObject,
    Node,
    compare,
    difference,
    format_path,
    intersection,
    paths,
    to_field_set,
    union,
)
from services.api.fieldmanager.merge import merge, prune
from services.api.fieldmanager.schema import Type, has_status, object_type

__all__ = ["ApplyConflict", "InvalidApply", "apply", "conflict_status", "update_managed_fields"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
BEFORE_FIRST_APPLY = "before-first-apply"
ANCIENT_CHANGES = "ancient-changes"
MAX_UPDATE_MANAGERS = 10
_MAX_ANNOTATIONS_BYTES = 256 * 1024

# Fields nobody owns (upstream's stripMetaManager).
_ROOT_SKIP = frozenset({"apiVersion", "kind", "metadata"})
_META_SKIP = frozenset({"name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
                        "generation", "managedFields", "resourceVersion"})

# (manager, operation, apiVersion ("" for Apply: an applier keeps one entry across versions), subresource)
Key = tuple[str, str, str, str]


class _Entry:
    __slots__ = ("fields", "api_version", "time")

    def __init__(self, fields: Node, api_version: str, time: str | None) -> None:
        self.fields = fields
        self.api_version = api_version
        self.time = time


class InvalidApply(ValueError):
    """A malformed apply request; `code` and `reason` are what upstream answers with."""

    def __init__(self, message: str, code: int = 400, reason: str = "BadRequest") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def _describe(key: Key) -> str:
    """printManager: `"name"`, the subresource, and for updaters the version they wrote."""
    manager, operation, api_version, subresource = key
    text = orjson.dumps(manager).decode()
    if subresource:
        text += f" with subresource {orjson.dumps(subresource).decode()}"
    if operation == "Update":
        text += f" using {api_version}"
    return text


class ApplyConflict(StatusError):
    """409: the applied configuration changes fields other managers own. `conflicts` is [(manager, path)]."""

    def __init__(self, found: list[tuple[Key, str]]) -> None:
        found = sorted(found, key=lambda c: c[0])
        self.found = found
        self.conflicts = [(key[0], path) for key, path in found]
        causes = [
            {"reason": "FieldManagerConflict", "message": f"conflict with {_describe(key)}", "field": path}
            for key, path in found
        ]
        if len(found) == 1:
            key, path = found[0]
            message = f"Apply failed with 1 conflict: conflict with {_describe(key)}: {path}"
        else:
            lines: list[str] = []
            previous: Key | None = None
            for key, path in found:
                if key != previous:
                    lines.append(f"conflicts with {_describe(key)}:")
                    previous = key
                lines.append(f"- {path}")
            message = f"Apply failed with {len(found)} conflicts: " + "\n".join(lines)
        super().__init__(409, "Conflict", message, {"causes": causes})


def conflict_status(conflict: ApplyConflict) -> dict[str, Any]:
    """Upstream's Status body for an apply conflict (details carry only the causes, as upstream's do)."""
    return conflict.to_status()


# ---------------------------------------------------------------------------------------------------------
# managedFields on the wire


def _decode(entries: Any) -> dict[Key, _Entry] | None:
    """The managers of an object, or None when the list is malformed (then upstream falls back)."""
    if not isinstance(entries, list):
        return None
    managers: dict[Key, _Entry] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            return None
        operation = entry.get("operation")
        api_version = entry.get("apiVersion")
        fields = entry.get("fieldsV1") or {}
        if operation not in ("Apply", "Update") or not api_version or entry.get("fieldsType") != "FieldsV1":
            return None
        if not isinstance(fields, dict):
            return None
        key = (entry.get("manager") or "", operation, "" if operation == "Apply" else api_version,
               entry.get("subresource") or "")
        managers[key] = _Entry(fields, api_version, entry.get("time"))
    return managers


def _encode(managers: dict[Key, _Entry]) -> list[dict[str, Any]]:
    entries = []
    for (manager, operation, _, subresource), entry in managers.items():
        encoded: dict[str, Any] = {"manager": manager, "operation": operation}
        encoded["apiVersion"] = entry.api_version
        if entry.time:
            encoded["time"] = entry.time
        encoded["fieldsType"] = "FieldsV1"
        encoded["fieldsV1"] = entry.fields
        if subresource:
            encoded["subresource"] = subresource
        entries.append(encoded)
    entries.sort(key=lambda e: (e["operation"], e.get("time") or "", e["manager"], e["apiVersion"],
                                e.get("subresource", "")))
    return entries


def _cap_updaters(managers: dict[Key, _Entry]) -> None:
    """Fold the oldest update managers into `ancient-changes` so at most ten remain (per version bucket)."""
    updaters = [key for key in managers if key[1] == "Update"]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return
    updaters.sort(key=lambda k: (managers[k].time or "", k))
    first_of_version: dict[str, Key] = {}
    remaining = len(updaters)
    for key in updaters:
        if remaining <= MAX_UPDATE_MANAGERS:
            break
        entry = managers[key]
        bucket = (ANCIENT_CHANGES, "Update", entry.api_version, "")
        first = first_of_version.get(entry.api_version)
        if first is None:
            first_of_version[entry.api_version] = key
            continue
        if bucket not in managers:
            managers[bucket] = managers.pop(first)
        held = managers[bucket]
        managers[bucket] = _Entry(union(held.fields, entry.fields), entry.api_version, entry.time)
        del managers[key]
        remaining -= 1


def _with_managed_fields(obj: dict[str, Any], entries: list[dict[str, Any]] | None) -> dict[str, Any]:
    out = dict(obj)
    metadata = dict(out.get("metadata") or {})
    if entries:
        metadata["managedFields"] = entries
    else:
        metadata.pop("managedFields", None)
    out["metadata"] = metadata
    return out


# ---------------------------------------------------------------------------------------------------------
# Comparing objects


def _ignored(t: Type, subresource: str) -> frozenset[str]:
    """Top-level fields a write does not own (upstream's reset fields): status via the main resource, spec
    via the status subresource."""
    if not has_status(t):
        return frozenset()
    if subresource == "status":
        return frozenset({"spec"})
    if not subresource:
        return frozenset({"status"})
    return frozenset()


def _diff(t: Type, old: dict[str, Any], new: dict[str, Any], ignored: frozenset[str]) -> tuple[Node, Node]:
    """compare() over what managers can own: no apiVersion/kind, no server-owned metadata, no reset fields."""
    changed, removed = compare(t, old, new, _ROOT_SKIP | ignored)
    old_meta, new_meta = old.get("metadata"), new.get("metadata")
    if old_meta != new_meta:
        meta_type = t.field("metadata")
        meta_changed, meta_removed = compare(meta_type, old_meta if isinstance(old_meta, dict) else {},
                                             new_meta if isinstance(new_meta, dict) else {}, _META_SKIP)
        if meta_changed:
            changed["f:metadata"] = meta_changed
        if meta_removed:
            removed["f:metadata"] = meta_removed
    return changed, removed


def _strip(fields: Node, ignored: frozenset[str]) -> Node:
    """Drop what nobody owns from an applier's set (stripMetaManager plus reset fields)."""
    out = {k: v for k, v in fields.items() if k[2:] not in ignored and k not in ("f:apiVersion", "f:kind")}
    meta = out.pop("f:metadata", None)
    if meta:
        kept = {k: v for k, v in meta.items() if k != "." and k[2:] not in _META_SKIP}
        if kept:
            out["f:metadata"] = kept
    return out


def _without(fields: Node, ignored: frozenset[str]) -> Node:
    if not ignored or not any(("f:" + name) in fields for name in ignored):
        return fields
    return {k: v for k, v in fields.items() if k[2:] not in ignored}


# ---------------------------------------------------------------------------------------------------------
# Non-apply writes


def update_managed_fields(
    api_version: str,
    kind: str,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str = "Update",
    subresource: str = "",
    *,
    now: str,
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`new` with managedFields after a create (old None), update or non-apply patch by `manager`.

    Call it after decoding and defaulting but before the strategy's own changes, as upstream does; the
    default manager name derived from the user agent is the caller's. Never raises: an object that cannot
    be typed keeps its previous managedFields, as upstream's UpdateNoErrors does.
    """
    live_meta = (old or {}).get("metadata") or {}
    live_fields = live_meta.get("managedFields")
    requested = (new.get("metadata") or {}).get("managedFields")
    managers: dict[Key, _Entry] | None = None
    if subresource:
        requested = None
    elif isinstance(requested, list) and (not requested or requested == [{}]):
        managers = {}
    elif requested:
        managers = _decode(requested) or None
    from_live = managers is None
    if managers is None:
        managers = _decode(live_fields or []) or {}
    if not managers and old is not None and live_meta.get("uid"):
        return _with_managed_fields(new, None)
    t = object_type(api_version, kind, schema)
    ignored = _ignored(t, subresource)
    try:
        changed, removed = _diff(t, old or {}, new, ignored)
    except InvalidObject:
        return _with_managed_fields(new, live_fields)
    if not changed and not removed and from_live:
        return _with_managed_fields(new, live_fields)
    touched = union(changed, removed)
    for key, entry in list(managers.items()):
        rest = difference(entry.fields, touched)
        if rest is not entry.fields:
            if rest:
                managers[key] = _Entry(rest, entry.api_version, entry.time)
            else:
                del managers[key]
    if changed:
        key = (manager or "unknown", operation, "" if operation == "Apply" else api_version, subresource)
        previous = managers.get(key)
        fields = union(previous.fields, changed) if previous else changed
        managers[key] = _Entry(fields, api_version, now)
    _cap_updaters(managers)
    return _with_managed_fields(new, _encode(managers))


# ---------------------------------------------------------------------------------------------------------
# Apply


def _group_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, _, version = api_version.partition("/")
        return group, version
    return "", api_version


def _check_config(api_version: str, kind: str, config: Any) -> None:
    if not isinstance(config, dict):
        names = {list: "array", str: "string", bool: "bool", int: "number", float: "number"}
        got = names.get(type(config), "null" if config is None else "value")
        raise InvalidApply("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
                           f"unmarshal {got} into Go value of type map[string]interface {{}}")
    got_version = config.get("apiVersion")
    got_kind = config.get("kind")
    if got_version != api_version or got_kind != kind:
        group, version = _group_version(got_version if isinstance(got_version, str) else "")
        got_kind = got_kind if isinstance(got_kind, str) else ""
        raise InvalidApply(f"invalid object type: {group}/{version}, Kind={got_kind}")
    metadata = config.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidApply("metadata must be an object")
    if isinstance(metadata, dict) and metadata.get("managedFields") is not None:
        raise InvalidApply("metadata.managedFields must be nil")


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _object_name(api_version: str, kind: str, config: dict[str, Any]) -> str:
    metadata = config.get("metadata") or {}
    group, version = _group_version(api_version)
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}; {group}/{version}, Kind={kind}"


def apply(
    api_version: str,
    kind: str,
    live: dict[str, Any] | None,
    config: Any,
    manager: str,
    force: bool,
    now: str,
    *,
    subresource: str = "",
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: the object does not exist yet).

    Raises InvalidApply (a ValueError) for malformed configurations and ApplyConflict (409) when the
    configuration changes fields other managers own, unless `force`.
    """
    _check_config(api_version, kind, config)
    t = object_type(api_version, kind, schema)
    ignored = _ignored(t, subresource)
    live_obj = live or {}
    managers = _decode((live_obj.get("metadata") or {}).get("managedFields") or []) or {}
    try:
        config_set = _without(to_field_set(t, config), ignored)
    except InvalidObject as error:
        where = _object_name(api_version, kind, config)
        message = f"failed to create typed patch object ({where}): {error}"
        raise InvalidApply(message, 500, "InternalError") from None
    try:
        if not managers and live is not None:
            before, _ = _diff(t, {}, live_obj, ignored)
            if before:
                key = (BEFORE_FIRST_APPLY, "Update", api_version, subresource)
                managers[key] = _Entry(before, api_version, now)
        args = (t, api_version, live_obj, config, config_set, managers, manager, subresource, ignored, now)
        try:
            result = _apply(*args, force)
        except ApplyConflict as conflict:
            allowed = _allowed_by_last_applied(t, api_version, live_obj) if manager == "kubectl" else None
            if allowed is None:
                raise
            remaining = [(k, p) for k, p in conflict.found if p not in allowed]
            if remaining:
                raise ApplyConflict(remaining) from None
            result = _apply(*args, True)
    except InvalidObject as error:
        raise InvalidApply(f"failed to create typed live object ({_object_name(api_version, kind, config)}): "
                           f"{error}", 500, "InternalError") from None
    if manager == "kubectl":
        _update_last_applied(result, config)
    return result


def _apply(t: Type, api_version: str, live: dict[str, Any], config: dict[str, Any], config_set: Node,
           managers: dict[Key, _Entry], manager: str, subresource: str, ignored: frozenset[str], now: str,
           force: bool) -> dict[str, Any]:
    managers = dict(managers)
    me = (manager, "Apply", "", subresource)
    previous = managers.pop(me, None)
    merged = merge(t, _copy(live), _copy(config))
    if previous is not None and previous.fields:
        owned = config_set
        for entry in managers.values():
            owned = union(owned, entry.fields)
        prune(t, merged, previous.fields, owned)
    changed, removed = _diff(t, live, merged, ignored)
    found: list[tuple[Key, str]] = []
    taken: dict[Key, Node] = {}
    if changed:
        for key, entry in managers.items():
            overlap = intersection(entry.fields, changed)
            if overlap:
                taken[key] = overlap
                found.extend((key, format_path(path)) for path in paths(overlap))
    if found and not force:
        raise ApplyConflict(found)
    for key, entry in list(managers.items()):
        rest = entry.fields
        if key in taken:
            rest = difference(rest, taken[key])
        if removed:
            rest = difference(rest, removed)
        if not rest:
            del managers[key]
        elif rest is not entry.fields:
            managers[key] = _Entry(rest, entry.api_version, entry.time)
    mine = _strip(config_set, ignored)
    unchanged = merged == live
    if mine:
        time = (previous.time if previous else None) if unchanged else now
        managers[me] = _Entry(mine, api_version, time)
    _cap_updaters(managers)
    merged = merged if isinstance(merged, dict) else {}
    metadata = merged.get("metadata")
    if not isinstance(metadata, dict):  # a configuration's `metadata: null` leaves none
        metadata = merged["metadata"] = {}
    entries = _encode(managers)
    if entries:
        metadata["managedFields"] = entries
    else:
        metadata.pop("managedFields", None)
    return merged


def _allowed_by_last_applied(t: Type, api_version: str, live: dict[str, Any]) -> set[str] | None:
    """Fields a client-side `kubectl apply` last set and that still hold that value: `kubectl apply
    --server-side` may take them over without a conflict (upstream's lastAppliedManager)."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED)
    if not text:
        return None
    try:
        last = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(last, dict) or last.get("apiVersion") != api_version:
        return None
    last_set = to_field_set(t, last)
    changed, removed = compare(t, last, live)
    allowed = difference(difference(last_set, changed), removed)
    return {format_path(path) for path in paths(allowed)}


def _update_last_applied(obj: dict[str, Any], config: dict[str, Any]) -> None:
    """Keep a client-side apply annotation in step with what `kubectl` applied server-side."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not annotations.get(LAST_APPLIED):
        return
    applied = dict(config)
    applied_meta = dict(applied.get("metadata") or {})
    applied_annotations = dict(applied_meta.get("annotations") or {})
    applied_annotations.pop(LAST_APPLIED, None)
    if applied_annotations:
        applied_meta["annotations"] = applied_annotations
    else:
        applied_meta.pop("annotations", None)
    applied["metadata"] = applied_meta
    value = orjson.dumps(applied, option=orjson.OPT_SORT_KEYS).decode() + "\n"
    annotations = {**annotations, LAST_APPLIED: value}
    if sum(len(k) + len(v) for k, v in annotations.items()) > _MAX_ANNOTATIONS_BYTES:
        del annotations[LAST_APPLIED]
    metadata["annotations"] = annotations

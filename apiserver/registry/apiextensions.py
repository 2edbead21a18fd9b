"""CustomResourceDefinitions, and the strategy every custom resource is served with."""

from __future__ import annotations

from typing import Any

from apiserver.registry import crschema
from apiserver.registry.strategy import Cause, Obj, Strategy
from services.api import errors
from services.api.catalog import Resource, Scale
from services.api.validation import (
    invalid,
    is_dns1035_label,
    is_dns1123_subdomain,
    name_is_dns_subdomain,
    not_supported,
    required,
    validate_immutable,
    validate_object_meta,
    validate_object_meta_update,
)

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def validate_names(names: dict[str, Any], path: str) -> list[Cause]:
    """Upstream's ValidateCustomResourceDefinitionNames: every name is a DNS-1035 label (kinds once
    lowercased, so they may have mixed case and dashes), and kind and listKind differ."""
    causes: list[Cause] = []
    for key in ("plural", "singular"):
        value = names.get(key) or ""
        if value and (errs := is_dns1035_label(value)):
            causes.append(invalid(f"{path}.{key}", value, ",".join(errs)))
    for key in ("kind", "listKind"):
        value = names.get(key) or ""
        if value and (errs := is_dns1035_label(value.lower())):
            causes.append(invalid(f"{path}.{key}", value, "may have mixed case, but should otherwise match: "
                                  + ",".join(errs)))
    for key in ("shortNames", "categories"):
        for i, value in enumerate(names.get(key) or ()):
            if errs := is_dns1035_label(value if isinstance(value, str) else ""):
                causes.append(invalid(f"{path}.{key}[{i}]", value, ",".join(errs)))
    kind = names.get("kind") or ""
    if kind and kind == names.get("listKind"):
        causes.append(invalid(f"{path}.listKind", kind, "kind and listKind may not be the same"))
    return causes


def _storage_version(crd: Obj) -> str:
    versions = (crd.get("spec") or {}).get("versions") or []
    return next((v.get("name") or "" for v in versions if isinstance(v, dict) and v.get("storage")), "")


def validate_stored_versions(crd: Obj) -> list[Cause]:
    """Upstream's ValidateCustomResourceDefinitionStoredVersions: status.storedVersions holds the storage
    version and nothing spec.versions no longer lists (objects may still be stored in it)."""
    stored = list((crd.get("status") or {}).get("storedVersions") or [])
    path = "status.storedVersions"
    if not stored:
        return [invalid(path, stored, "must have at least one stored version")]
    versions = [v for v in (crd.get("spec") or {}).get("versions") or [] if isinstance(v, dict)]
    names = {v.get("name") for v in versions}
    causes = [invalid(path, v, f"must have the storage version {v.get('name')}") for v in versions
              if v.get("storage") and v.get("name") not in stored]
    causes += [invalid(f"{path}[{i}]", name, "must appear in spec.versions") for i, name in enumerate(stored)
               if name not in names]
    return causes


def _cause(field: str, message: str, reason: str = "FieldValueInvalid") -> Cause:
    return errors.cause(field, message, reason)


class CustomResourceDefinitionStrategy(Strategy):
    """Upstream's apiextensions validation for the fields that decide what gets served."""

    uses_generation = True
    # Finalizers stay writable: upstream's CRD finalizer removes its own through the status subresource.
    status_resets_metadata = ("labels", "annotations", "ownerReferences")

    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        names = spec.setdefault("names", {})
        if names.get("kind") and not names.get("listKind"):
            names["listKind"] = f"{names['kind']}List"
        if names.get("plural") and not names.get("singular") and names.get("kind"):
            names["singular"] = str(names["kind"]).lower()
        spec.setdefault("conversion", {"strategy": "None"})

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        storage = _storage_version(obj)
        if storage:
            obj["status"] = {"storedVersions": [storage]}
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CLEANUP_FINALIZER)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """The status stays the old one, but a new storage version is recorded as stored at once."""
        super().prepare_for_update(new, old)
        storage = _storage_version(new)
        if storage:
            stored = new.setdefault("status", {}).setdefault("storedVersions", [])
            if storage not in stored:
                new["status"] = {**new["status"], "storedVersions": [*stored, storage]}

    def validate(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            causes = validate_object_meta(obj.get("metadata") or {}, namespaced=False)
            return [*causes, _cause("spec", "Required value", "FieldValueRequired")]
        group = spec.get("group") or ""
        names = spec.get("names") or {}
        plural = names.get("plural") or ""

        def crd_name(name: str, prefix: bool) -> list[str]:
            errs = name_is_dns_subdomain(name, prefix)
            if name != f"{plural}.{group}":
                errs.append('must be spec.names.plural+"."+spec.group')
            return errs

        causes = validate_object_meta(obj.get("metadata") or {}, namespaced=False, name_fn=crd_name)
        if not group:
            causes.append(required("spec.group"))
        elif errs := is_dns1123_subdomain(group):
            causes.append(invalid("spec.group", group, ",".join(errs)))
        elif "." not in group:
            causes.append(invalid("spec.group", group, "should be a domain with at least one dot"))
        for key in ("plural", "singular", "kind", "listKind"):
            if not names.get(key):
                causes.append(required(f"spec.names.{key}"))
        causes += validate_names(names, "spec.names")
        scope = spec.get("scope")
        if not scope:
            causes.append(required("spec.scope"))
        elif scope not in ("Namespaced", "Cluster"):
            causes.append(not_supported("spec.scope", scope, ("Cluster", "Namespaced")))
        versions = spec.get("versions")
        if not isinstance(versions, list) or not versions:
            causes.append(invalid("spec.versions", versions, "must have exactly one version marked as storage "
                                  "version"))
            return causes
        names_seen = [v.get("name") for v in versions if isinstance(v, dict)]
        if len(set(names_seen)) != len(names_seen):
            causes.append(invalid("spec.versions", versions, "must contain unique version names"))
        if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
            causes.append(invalid("spec.versions", versions, "must have exactly one version marked as storage "
                                  "version"))
        for i, version in enumerate(versions):
            if not isinstance(version, dict):
                causes.append(_cause(f"spec.versions[{i}]", "Invalid value: must be an object"))
                continue
            vname = version.get("name") or ""
            if errs := is_dns1035_label(vname):
                causes.append(invalid(f"spec.versions[{i}].name", vname, ",".join(errs)))
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                causes.append(_cause(f"spec.versions[{i}].schema.openAPIV3Schema", "Required value: schemas are "
                                     "required", "FieldValueRequired"))
            else:
                causes += crschema.validate_schema(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
        return causes

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        accepted = (new.get("status") or {}).get("acceptedNames") or {}
        return validate_object_meta_update(new.get("metadata"), old.get("metadata")) + validate_names(
            accepted, "status.acceptedNames")

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate(new)
        spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        names, old_names = spec.get("names") or {}, old_spec.get("names") or {}
        established = any(c.get("type") == "Established" and c.get("status") == "True"
                          for c in (old.get("status") or {}).get("conditions") or ())
        if established:
            causes += validate_immutable(spec.get("scope"), old_spec.get("scope"), "spec.scope")
            causes += validate_immutable(names.get("kind"), old_names.get("kind"), "spec.names.kind")
        causes += validate_immutable(spec.get("group"), old_spec.get("group"), "spec.group")
        causes += validate_immutable(names.get("plural"), old_names.get("plural"), "spec.names.plural")
        causes += validate_stored_versions(new)
        return causes


class CustomResourceStrategy(Strategy):
    """Custom resources: the CRD version's structural schema prunes, defaults and validates them."""

    uses_generation = True
    # Upstream's custom-resource status strategy keeps the whole old object but status and managedFields.
    status_resets_metadata = ("labels", "annotations", "finalizers", "ownerReferences", "generateName")

    def defaults(self, obj: Obj) -> None:
        schema = self.resource.schema
        if schema is not None:
            crschema.prune(schema, obj)
            crschema.apply_defaults(schema, obj)

    def prepare_for_create(self, obj: Obj) -> None:
        if self.resource.has_status:
            obj.pop("status", None)

    def validate(self, obj: Obj) -> list[Cause]:
        causes = validate_object_meta(obj.get("metadata") or {}, namespaced=self.resource.namespaced)
        if self.resource.schema is not None:
            causes += crschema.validate(self.resource.schema, obj)
        return causes

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = validate_object_meta(new.get("metadata") or {}, namespaced=self.resource.namespaced)
        if self.resource.schema is not None:
            causes += crschema.validate(self.resource.schema, new, old)
        return causes

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        if self.resource.schema is None:
            return []
        return crschema.validate(self.resource.schema, new, old)

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        for path in self.resource.selectable_fields:
            value = crschema.value_at(obj, path)
            fields[path.lstrip(".")] = "" if value is None else str(value).lower() if isinstance(value, bool) \
                else str(value)
        return fields


def served_resources(crd: Obj) -> list[Resource]:
    """The catalog entries a CRD serves: one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    storage = next((v["name"] for v in versions if v.get("storage")), versions[0]["name"] if versions else "")
    out = []
    for version in versions:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        subs = []
        scale = None
        if "status" in subresources:
            subs.append("status")
        if "scale" in subresources:
            subs.append("scale")
            sc = subresources.get("scale") or {}
            scale = Scale(
                spec_replicas=sc.get("specReplicasPath", ".spec.replicas"),
                status_replicas=sc.get("statusReplicasPath", ".status.replicas"),
                label_selector=sc.get("labelSelectorPath", ""),
            )
        out.append(Resource(
            group=spec.get("group", ""),
            version=version["name"],
            kind=names.get("kind", ""),
            plural=names.get("plural", ""),
            singular=names.get("singular") or str(names.get("kind", "")).lower(),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=tuple(subs),
            storage_version=storage,
            scale=scale,
            custom=True,
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()) or None,
            selectable_fields=tuple(f.get("jsonPath", "") for f in version.get("selectableFields") or ()),
        ))
    return out


def accepted_status(crd: Obj, conflicts: str | None) -> dict[str, Any]:
    """The status the apiserver reports once it has decided about a CRD's names."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    status = dict(crd.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") not in ("NamesAccepted", "Established")]
    previous = {c.get("type"): c for c in status.get("conditions") or []}

    def condition(kind: str, ok: bool, reason: str, message: str, now: str) -> dict[str, Any]:
        old = previous.get(kind)
        state = "True" if ok else "False"
        since = old["lastTransitionTime"] if old and old.get("status") == state else now
        return {"type": kind, "status": state, "lastTransitionTime": since, "reason": reason, "message": message}

    from services.api.meta import now_rfc3339

    now = now_rfc3339()
    if conflicts:
        conditions.append(condition("NamesAccepted", False, "NameConflict", conflicts, now))
        conditions.append(condition("Established", False, "NotAccepted", "not all names are accepted", now))
    else:
        conditions.append(condition("NamesAccepted", True, "NoConflicts", "no conflicts found", now))
        conditions.append(condition("Established", True, "InitialNamesAccepted",
                                    "the initial names have been accepted", now))
        status["acceptedNames"] = names
    if crd["metadata"].get("deletionTimestamp"):
        conditions.append({"type": "Terminating", "status": "True", "lastTransitionTime": now,
                           "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"})
    status["conditions"] = conditions
    stored = list(status.get("storedVersions") or [])
    storage = next((v.get("name") for v in spec.get("versions") or [] if v.get("storage")), None)
    if storage and storage not in stored:
        stored.append(storage)
    status["storedVersions"] = stored
    return status

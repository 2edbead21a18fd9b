"""The request options upstream validates before it runs a verb (CreateOptions, UpdateOptions, PatchOptions,
DeleteOptions): a bad value is a 422 Invalid of the options kind in meta.k8s.io naming the option."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apiserver.endpoints.serialization.fieldvalidation import go_quote
from apiserver.registry.store import ListOptions
from services.api import errors
from services.api import validation as v
from services.api.validation import Cause

#: upstream's FieldManagerMaxLength, in bytes
FIELD_MANAGER_MAX_LENGTH = 128
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")
#: the options kind each write verb decodes its query into
OPTIONS_KINDS = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
                 "delete": "DeleteOptions", "deletecollection": "DeleteOptions"}


def refuse(kind: str, causes: list[Cause]) -> None:
    """Raise upstream's 422 for options of `kind` when there are causes."""
    if causes:
        raise errors.invalid(kind, "meta.k8s.io", "", causes)


def field_manager_causes(manager: str) -> list[Cause]:
    """ValidateFieldManager: at most 128 bytes, every character printable."""
    causes: list[Cause] = []
    if len(manager.encode()) > FIELD_MANAGER_MAX_LENGTH:
        causes.append(v.too_long("fieldManager", FIELD_MANAGER_MAX_LENGTH))
    offset = 0
    for ch in manager:
        if not ch.isprintable():
            causes.append(v.cause("fieldManager", f"Invalid value: {go_quote(manager)}: invalid character "
                                  f"U+{ord(ch):04X} (at position {offset})", v.INVALID))
        offset += len(ch.encode("utf-8", "surrogatepass"))
    return causes


def dry_run_causes(values: Sequence[Any]) -> list[Cause]:
    """ValidateDryRun: "All" is the only value; the whole list is shown as Go's %#v prints a []string."""
    if all(value == "All" for value in values):
        return []
    shown = "[]string{" + ", ".join(go_quote(str(value)) for value in values) + "}"
    return [v.cause("dryRun", f'Unsupported value: {shown}: supported values: "All"', v.NOT_SUPPORTED)]


def delete_causes(propagation: Any, orphan_set: bool, dry_run: Sequence[Any]) -> list[Cause]:
    """ValidateDeleteOptions: one known propagation policy, not together with orphanDependents."""
    causes: list[Cause] = []
    if propagation is not None and orphan_set:
        causes.append(v.invalid("propagationPolicy", propagation,
                                "orphanDependents and deletionPropagation cannot be both set"))
    if propagation is not None and propagation not in PROPAGATION_POLICIES:
        causes.append(v.not_supported("propagationPolicy", propagation, (*PROPAGATION_POLICIES, "nil")))
    causes.extend(dry_run_causes(dry_run))
    return causes


def list_causes(watch: bool, opts: ListOptions, send_initial: bool | None, allow_bookmarks: bool) -> list[Cause]:
    """ValidateListOptions (and its watch half): how resourceVersionMatch, continue and sendInitialEvents
    may combine."""
    causes: list[Cause] = []
    match, rv = opts.resource_version_match, opts.resource_version
    if watch:
        if send_initial is not None and match != "NotOlderThan":
            causes.append(v.forbidden("resourceVersionMatch",
                                      "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
        if send_initial and not allow_bookmarks:
            causes.append(v.required("allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks "
                                                            "to true"))
        if match:
            if send_initial is None:
                causes.append(v.forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden for watch "
                                                                  "unless sendInitialEvents is provided"))
            if match != "NotOlderThan":
                causes.append(v.not_supported("resourceVersionMatch", match, ("NotOlderThan",)))
            if opts.continue_token:
                causes.append(v.forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue "
                                                                  "is provided"))
        return causes
    if match:
        if not rv:
            causes.append(v.forbidden("resourceVersionMatch",
                                      "resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if opts.continue_token:
            causes.append(v.forbidden("resourceVersionMatch",
                                      "resourceVersionMatch is forbidden when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            causes.append(v.not_supported("resourceVersionMatch", match, ("Exact", "NotOlderThan", "")))
        if match == "Exact" and rv == "0":
            causes.append(v.forbidden("resourceVersionMatch",
                                      'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if send_initial is not None:
        causes.append(v.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return causes

"""The per-resource strategy: what upstream's registry `rest.RESTCreateStrategy`,
`RESTUpdateStrategy` and friends decide for one resource.

The generic store (`apiserver.registry.store`) does everything that is the same for
every resource (metadata, resourceVersion, preconditions, finalizers, the status
and scale subresources, storage); a strategy only says what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.api.catalog import Resource
    from services.auth.identity import UserInfo

Obj = dict[str, Any]
Cause = dict[str, str]


@dataclass
class Allocation:
    """Keys a write must create or delete in the same etcd transaction as the object,
    so that allocated values (service IPs, node ports) are never given out twice."""

    create: dict[str, bytes] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)


class Strategy:
    """Defaults: plain resource, no generation, status cleared on create when it has a status subresource."""

    #: metadata.generation is set to 1 on create and bumped when the spec changes.
    uses_generation: bool = False
    #: PUT without metadata.resourceVersion is allowed (upstream's AllowUnconditionalUpdate).
    allow_unconditional_update: bool = True
    #: Create-on-update (PUT of a missing object creates it), as for leases and events upstream.
    allow_create_on_update: bool = False
    #: Graceful deletion applies (pods): delete sets deletionTimestamp and waits.
    graceful: bool = False
    #: Metadata fields a status update may not change (its strategy's PrepareForUpdate copies them from
    #: the old object). Upstream's status strategies of built-in kinds reset only the spec, so labels
    #: and annotations sent with a status patch are kept; the exceptions override this.
    status_resets_metadata: tuple[str, ...] = ()

    def __init__(self, resource: Resource) -> None:
        self.resource = resource

    # -- create -------------------------------------------------------------
    def defaults(self, obj: Obj) -> None:
        """Fill upstream's defaults; runs on every create and update body, like upstream's decode."""

    def prepare_for_create(self, obj: Obj) -> None:
        """Reset what a client may not set on create (usually status)."""
        if self.resource.has_status:
            obj.pop("status", None)

    def set_requester(self, obj: Obj, user: UserInfo | None) -> None:
        """Record who creates the object, where the resource keeps that (a CSR's spec.username and groups)."""

    def validate(self, obj: Obj) -> list[Cause]:
        """Causes for everything wrong with a new object, each naming its field path."""
        return []

    # -- update -------------------------------------------------------------
    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """Main-resource update: the status subresource owns status, so keep the old one."""
        if self.resource.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)

    def prepare_for_status_update(self, new: Obj, old: Obj) -> None:
        """Status update: status and metadata change; spec and everything else come from the old
        object, and so do the metadata fields of `status_resets_metadata`."""
        status = new.get("status")
        for key in list(new):
            if key not in ("metadata", "status", "apiVersion", "kind"):
                del new[key]
        for key, value in old.items():
            if key not in ("metadata", "status", "apiVersion", "kind"):
                new[key] = value
        if status is None:
            new.pop("status", None)
        meta, old_meta = new["metadata"], old.get("metadata") or {}
        for key in self.status_resets_metadata:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Causes for an update: by default the object must be valid and immutable fields unchanged."""
        return self.validate(new)

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        return []

    def spec_changed(self, new: Obj, old: Obj) -> bool:
        """Whether an update bumps metadata.generation: anything but metadata and status changed."""
        for key in set(new) | set(old):
            if key in ("metadata", "status", "apiVersion", "kind"):
                continue
            if new.get(key) != old.get(key):
                return True
        return False

    # -- reads --------------------------------------------------------------
    def field_set(self, obj: Obj) -> dict[str, str]:
        """Values of the fields `fieldSelector` may name; metadata.name and namespace always."""
        meta = obj.get("metadata", {})
        fields = {"metadata.name": meta.get("name", "")}
        if self.resource.namespaced:
            fields["metadata.namespace"] = meta.get("namespace", "")
        return fields

    # -- allocation ---------------------------------------------------------
    async def allocate(self, ctx: Any, obj: Obj, old: Obj | None) -> Allocation:
        """Values to take from shared pools for this write (see `Allocation`)."""
        return Allocation()

    def release(self, obj: Obj) -> list[str]:
        """Allocation keys to delete together with the object."""
        return []

    # -- deletion -----------------------------------------------------------
    def grace_period(self, obj: Obj, requested: int | None) -> int:
        """Seconds of graceful deletion for this object; 0 deletes at once."""
        return 0

    def default_propagation(self) -> str | None:
        """The propagation policy of a delete that names none (upstream's DefaultGarbageCollectionPolicy);
        None is background."""
        return None

    def delete_warnings(self, propagation_set: bool) -> list[str]:
        """Warnings a delete answers with, given whether the client chose a propagation policy."""
        return []

    def deletion_blocked(self, obj: Obj) -> bool:
        """Whether something besides metadata.finalizers holds the object (a namespace's spec.finalizers)."""
        return False

    def prepare_for_delete(self, obj: Obj) -> None:
        """Changes made when deletion starts but cannot finish yet (a namespace turns Terminating)."""

    def prepare_for_approval_update(self, new: Obj, old: Obj) -> None:
        """The `approval` subresource (CSRs): only the approval conditions change."""
        raise NotImplementedError

    def validate_approval_update(self, new: Obj, old: Obj) -> list[Cause]:
        raise NotImplementedError

    def prepare_for_finalize(self, new: Obj, old: Obj) -> None:
        """The `finalize` subresource: only the finalizers it owns change."""
        raise NotImplementedError

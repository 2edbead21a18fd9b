"""Subresources with rules of their own, one REST object each as upstream's (StatusREST, ApprovalREST,
FinalizeREST, ScaleREST, BindingREST, EvictionREST, TokenREST, EphemeralContainersREST), found by the
name the catalog gives the subresource. They take and return decoded objects; HTTP stays in endpoints/.
"""

from __future__ import annotations

from apiserver.registry.store import RESTStore
from apiserver.registry.subresources.base import Check, Dependencies, SubresourceREST, TokenSigner
from apiserver.registry.subresources.binding import BindingREST
from apiserver.registry.subresources.ephemeral import EphemeralContainersREST
from apiserver.registry.subresources.eviction import EvictionREST
from apiserver.registry.subresources.scale import ScaleREST
from apiserver.registry.subresources.status import ApprovalREST, FinalizeREST, StatusREST
from apiserver.registry.subresources.token import TokenREST
from services.api.catalog import Resource

__all__ = ["BindingREST", "Check", "Dependencies", "SubresourceREST", "TokenSigner", "rest_for"]

_BY_NAME: dict[str, type[SubresourceREST]] = {cls.name: cls for cls in (
    StatusREST, ApprovalREST, FinalizeREST, ScaleREST, BindingREST, EvictionREST, TokenREST, EphemeralContainersREST,
)}


def rest_for(res: Resource, name: str, store: RESTStore, deps: Dependencies) -> SubresourceREST | None:
    """The REST object of subresource `name` of `res`, or None when the resource has no such one."""
    cls = _BY_NAME.get(name)
    if cls is None or name not in res.subresources or not cls.serves(res):
        return None
    return cls(store, deps)

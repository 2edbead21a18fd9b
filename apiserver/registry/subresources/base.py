"""What every subresource REST object is given: its resource's store and the stores of the others."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from apiserver.registry.store import RESTStore, WriteOptions
from apiserver.registry.strategy import Obj
from services.api import errors
from services.api.catalog import Resource

#: Signs a TokenRequest (its body, the namespace, the ServiceAccount, the bound object's reference) and
#: returns it with its status; the apiserver hands in its token issuer's, so the registry needs no auth.
TokenSigner = Callable[[Any, str, Obj, "Obj | None"], Obj]
#: Vets an object decoded or patched for a subresource before it is used (the handler's decoder).
Check = Callable[[Obj], None]


@dataclass(frozen=True)
class Dependencies:
    """The stores a subresource may read or write besides its own, and the token signer."""

    stores: Mapping[tuple[str, str, str], RESTStore]
    sign_token: TokenSigner


class SubresourceREST:
    """One subresource of one resource, as upstream's REST types: decoded objects in, objects out.

    `kind` is the (apiVersion, kind) it reads and writes, None for the parent resource's own kind;
    `verbs` the verbs it serves. A verb it serves is a method of the same name.
    """

    name: ClassVar[str] = ""
    verbs: ClassVar[tuple[str, ...]] = ()
    kind: ClassVar[tuple[str, str] | None] = None
    #: A create with an empty body reads it as an empty object of `kind`.
    body_optional: ClassVar[bool] = False

    def __init__(self, store: RESTStore, deps: Dependencies) -> None:
        self.store = store
        self.deps = deps

    @classmethod
    def serves(cls, res: Resource) -> bool:
        """Whether this subresource exists for `res` (the catalog names it; some need more)."""
        return True

    async def get(self, namespace: str | None, name: str) -> Obj:
        raise errors.method_not_allowed()

    async def create(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        raise errors.method_not_allowed()

    async def update(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        raise errors.method_not_allowed()

    async def patch(
        self, namespace: str | None, name: str, patch_type: str, patch: Any, opts: WriteOptions, check: Check
    ) -> Obj:
        raise errors.method_not_allowed()


def success(code: int = 201) -> Obj:
    """The Status an action subresource (binding, eviction) answers when it is done."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}

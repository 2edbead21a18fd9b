"""serviceaccounts/token (upstream's TokenREST): a token for the ServiceAccount, optionally bound to a
Pod, Secret or Node that must exist, signed by the apiserver's issuer."""

from __future__ import annotations

from typing import ClassVar

from apiserver.registry.store import WriteOptions
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import SubresourceREST
from services.api import errors

_BOUND_KINDS = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}


class TokenREST(SubresourceREST):
    name: ClassVar[str] = "token"
    verbs: ClassVar[tuple[str, ...]] = ("create",)
    kind: ClassVar[tuple[str, str] | None] = ("authentication.k8s.io/v1", "TokenRequest")
    body_optional: ClassVar[bool] = True

    async def create(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        ns = namespace or ""
        await self.store.admit_subresource(ns, name, body, "token", opts)
        account = await self.store.get(ns, name)
        spec = body.get("spec")
        bound = spec.get("boundObjectRef") if isinstance(spec, dict) else None
        if bound is not None and not isinstance(bound, dict):
            raise errors.bad_request("TokenRequest spec.boundObjectRef must be an object")
        if bound:
            kind = bound.get("kind")
            plural = _BOUND_KINDS.get(kind or "")
            if plural is None:
                raise errors.bad_request(f"cannot bind token to object of type {kind}")
            stores = self.deps.stores
            target = await stores[("", "v1", plural)].get(None if kind == "Node" else ns, bound.get("name", ""))
            if bound.get("uid") and bound["uid"] != target["metadata"].get("uid"):
                raise errors.conflict(plural, "", bound.get("name", ""), "the UID in the bound object reference "
                                      f"({bound['uid']}) does not match the UID in record. The object might have "
                                      "been deleted and then recreated")
            bound = {**bound, "uid": target["metadata"].get("uid", "")}
            node_name = (target.get("spec") or {}).get("nodeName") if kind == "Pod" else None
            if node_name:
                # As upstream's ServiceAccountTokenPodNodeInfo: a pod's token names its node too, if it exists.
                try:
                    node = await stores[("", "v1", "nodes")].get(None, node_name, "0")
                except errors.StatusError as exc:
                    if exc.code != 404:
                        raise
                else:
                    bound["node"] = {"name": node_name, "uid": node["metadata"].get("uid", "")}
        return self.deps.sign_token(body, ns, account, bound)

"""Discovery documents: legacy (`/api`, `/apis`, per group and version) and aggregated (v2)."""

from __future__ import annotations

from typing import Any

from apiserver.endpoints.serialization.negotiation import media_params
from services.api.catalog import Catalog, Resource

SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "ephemeralcontainers": ("get", "patch", "update"),
    "finalize": ("update",),
    "binding": ("create",),
    "eviction": ("create",),
    "token": ("create",),
    "log": ("get",),
    "exec": ("create", "get"),
    "attach": ("create", "get"),
    "portforward": ("create", "get"),
    "proxy": ("create", "delete", "get", "patch", "update"),
}

# (group, version, kind) a subresource answers with, when it is not the resource's own kind.
SUBRESOURCE_KINDS: dict[str, tuple[str, str, str]] = {
    "scale": ("autoscaling", "v1", "Scale"),
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
    "exec": ("", "v1", "PodExecOptions"),
    "attach": ("", "v1", "PodAttachOptions"),
    "portforward": ("", "v1", "PodPortForwardOptions"),
}

AGGREGATED_TYPES = (
    ("v2", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
    ("v2beta1", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
)


def _sub_kind(res: Resource, sub: str) -> tuple[str, str, str]:
    if sub in SUBRESOURCE_KINDS:
        return SUBRESOURCE_KINDS[sub]
    if sub in ("proxy",):
        kind = "NodeProxyOptions" if res.kind == "Node" else f"{res.kind}ProxyOptions"
        return ("", "v1", kind)
    return (res.group, res.version, res.kind)


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group(catalog: Catalog, group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in catalog.versions(group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list(catalog: Catalog) -> dict[str, Any]:
    groups = [api_group(catalog, g) for g in catalog.groups() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group_doc(catalog: Catalog, group: str) -> dict[str, Any] | None:
    if not group or not catalog.versions(group):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **api_group(catalog, group)}


def api_resource_list(catalog: Catalog, group: str, version: str) -> dict[str, Any] | None:
    resources = catalog.in_group_version(group, version)
    if not resources:
        return None
    out: list[dict[str, Any]] = []
    for res in resources:
        entry: dict[str, Any] = {
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": list(res.verbs),
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        out.append(entry)
        for sub in res.subresources:
            g, v, k = _sub_kind(res, sub)
            sub_entry: dict[str, Any] = {
                "name": f"{res.plural}/{sub}",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": k,
                "verbs": list(SUBRESOURCE_VERBS.get(sub, ("get",))),
            }
            if (g, v) != (res.group, res.version):
                sub_entry["group"] = g
                sub_entry["version"] = v
            out.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


def _aggregated_resource(res: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": res.plural,
        "responseKind": {"group": res.group, "version": res.version, "kind": res.kind},
        "scope": "Namespaced" if res.namespaced else "Cluster",
        "singularResource": res.singular,
        "verbs": list(res.verbs),
    }
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if res.categories:
        entry["categories"] = list(res.categories)
    subs = []
    for sub in res.subresources:
        g, v, k = _sub_kind(res, sub)
        subs.append({
            "subresource": sub,
            "responseKind": {"group": g, "version": v, "kind": k},
            "verbs": list(SUBRESOURCE_VERBS.get(sub, ("get",))),
        })
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(catalog: Catalog, legacy: bool, version: str = "v2") -> dict[str, Any]:
    """APIGroupDiscoveryList for `/api` (legacy=True) or `/apis`."""
    items = []
    groups = [""] if legacy else [g for g in catalog.groups() if g]
    for group in groups:
        versions = []
        for v in catalog.versions(group):
            versions.append({
                "version": v,
                "resources": [_aggregated_resource(r) for r in catalog.in_group_version(group, v)],
                "freshness": "Current",
            })
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": versions})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }


def wants_aggregated(accept: str | None) -> tuple[str, str] | None:
    """The aggregated discovery version and content type the client accepts first, if any."""
    if not accept:
        return None
    for part in accept.split(","):
        mt, pieces = media_params(part)
        if pieces.get("g") == "apidiscovery.k8s.io" and pieces.get("as") == "APIGroupDiscoveryList":
            for version, content_type in AGGREGATED_TYPES:
                if pieces.get("v") == version:
                    return version, content_type
        if mt in ("application/json", "*/*") and "as" not in pieces:
            return None
    return None

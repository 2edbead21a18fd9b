"""Discovery with the aggregated groups merged in: `/apis` (legacy and aggregated v2) lists them after
the local ones, `/apis/<group>` is answered from their APIServices, and the aggregated document carries
the resources each extension apiserver last reported (Stale once it stops answering)."""

from __future__ import annotations

from typing import Any

from apiserver.aggregator.index import is_available

Obj = dict[str, Any]


def _versions(apiservices: list[Obj]) -> list[Obj]:
    out = []
    for a in apiservices:
        spec = a.get("spec") or {}
        out.append({"groupVersion": f"{spec.get('group')}/{spec.get('version')}", "version": spec.get("version")})
    return out


def api_group(group: str, apiservices: list[Obj]) -> Obj:
    versions = _versions(apiservices)
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0]}


def merge_group_list(local: Obj, remote: dict[str, list[Obj]]) -> Obj:
    served = {g["name"] for g in local.get("groups") or ()}
    extra = []
    for group, apiservices in remote.items():
        if group not in served:
            doc = api_group(group, apiservices)
            extra.append({"name": group, "versions": doc["versions"], "preferredVersion": doc["preferredVersion"]})
    return {**local, "groups": [*(local.get("groups") or ()), *extra]}


def _aggregated_resources(doc: Obj, group: str, version: str) -> list[Obj]:
    """An APIResourceList as aggregated discovery's resources, subresources under their parent."""
    resources: dict[str, Obj] = {}
    subresources: list[tuple[str, Obj]] = []
    for r in doc.get("resources") or ():
        name = str(r.get("name") or "")
        kind = {"group": r.get("group", group), "version": r.get("version", version), "kind": r.get("kind")}
        if "/" in name:
            parent, _, sub = name.partition("/")
            subresources.append((parent, {"subresource": sub, "responseKind": kind, "verbs": r.get("verbs") or []}))
            continue
        entry: Obj = {"resource": name, "responseKind": kind,
                      "scope": "Namespaced" if r.get("namespaced") else "Cluster",
                      "singularResource": r.get("singularName") or "", "verbs": r.get("verbs") or []}
        for key in ("shortNames", "categories"):
            if r.get(key):
                entry[key] = r[key]
        resources[name] = entry
    for parent, sub in subresources:
        if parent in resources:
            resources[parent].setdefault("subresources", []).append(sub)
    return list(resources.values())


def merge_aggregated(local: Obj, remote: dict[str, list[Obj]], fetched: dict[tuple[str, str], Obj]) -> Obj:
    served = {(i.get("metadata") or {}).get("name") for i in local.get("items") or ()}
    extra = []
    for group, apiservices in remote.items():
        if group in served:
            continue
        versions = []
        for a in apiservices:
            version = str((a.get("spec") or {}).get("version") or "")
            doc = fetched.get((group, version))
            if doc is None:
                continue
            versions.append({"version": version, "resources": _aggregated_resources(doc, group, version),
                             "freshness": "Current" if is_available(a) else "Stale"})
        if versions:
            extra.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": versions})
    return {**local, "items": [*(local.get("items") or ()), *extra]}

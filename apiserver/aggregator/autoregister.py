"""Local APIServices for the groups this apiserver serves itself, as upstream's autoregister controller
creates them at start (labelled automanaged `onstart`), so `kubectl get apiservices` lists every group."""

from __future__ import annotations

from typing import Any

from services.api.catalog import GROUP_ORDER, Catalog

AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
TOP_GROUP_PRIORITY = 18000


def local_apiservices(catalog: Catalog) -> list[dict[str, Any]]:
    """One local APIService per built-in group/version; earlier groups and versions rank higher."""
    out = []
    for res_group in catalog.groups():
        if res_group not in GROUP_ORDER:
            continue
        rank = GROUP_ORDER.index(res_group)
        versions = catalog.versions(res_group)
        for i, version in enumerate(versions):
            name = f"{version}.{res_group}" if res_group else version
            out.append({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name, "labels": {AUTOMANAGED: "onstart"}},
                "spec": {"group": res_group, "version": version,
                         "groupPriorityMinimum": max(TOP_GROUP_PRIORITY - 100 * rank, 1),
                         "versionPriority": max(15 - i, 1)},
            })
    return out

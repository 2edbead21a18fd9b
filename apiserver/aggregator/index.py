"""The APIServices of the watch cache, indexed by group and version, rebuilt only when they change."""

from __future__ import annotations

import re
from typing import Any

from apiserver.storage.cache import ResourceCache

Obj = dict[str, Any]


def is_local(apiservice: Obj) -> bool:
    return not isinstance((apiservice.get("spec") or {}).get("service"), dict)


def is_available(apiservice: Obj) -> bool:
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (apiservice.get("status") or {}).get("conditions") or ())


class APIServiceIndex:
    """Reads the cache the apiserver already keeps; a request costs one signature comparison."""

    def __init__(self, cache: ResourceCache) -> None:
        self.cache = cache
        self._signature: tuple[Any, ...] = ()
        self._by_gv: dict[tuple[str, str], Obj] = {}
        self._remote_groups: dict[str, list[Obj]] = {}

    def _refresh(self) -> None:
        c = self.cache
        signature = (id(c.entries), len(c.entries), c.history_start, c.history[-1].revision if c.history else 0)
        if signature == self._signature:
            return
        by_gv: dict[tuple[str, str], Obj] = {}
        groups: dict[str, list[Obj]] = {}
        for entry in c.entries.values():
            spec = entry.obj.get("spec") or {}
            key = (str(spec.get("group") or ""), str(spec.get("version") or ""))
            by_gv[key] = entry.obj
            if not is_local(entry.obj):
                groups.setdefault(key[0], []).append(entry.obj)
        for versions in groups.values():
            versions.sort(key=_version_order)
        self._by_gv, self._remote_groups, self._signature = by_gv, groups, signature

    def all(self) -> list[Obj]:
        self._refresh()
        return list(self._by_gv.values())

    def remote(self, group: str, version: str) -> Obj | None:
        """The APIService that sends `group/version` to a Service, if one does."""
        self._refresh()
        found = self._by_gv.get((group, version))
        return None if found is None or is_local(found) else found

    def remote_groups(self) -> dict[str, list[Obj]]:
        """Group -> its proxied APIServices, preferred version first; groups ordered by priority."""
        self._refresh()
        return dict(sorted(self._remote_groups.items(),
                           key=lambda item: (-int((item[1][0].get("spec") or {}).get("groupPriorityMinimum") or 0),
                                             item[0])))


def _version_order(apiservice: Obj) -> tuple[int, tuple[int, int, int, str]]:
    """Higher versionPriority first, then Kubernetes' version order (v2 > v1 > v1beta1 > v1alpha1)."""
    spec = apiservice.get("spec") or {}
    return (-int(spec.get("versionPriority") or 0), _kube_version_key(str(spec.get("version") or "")))


def _kube_version_key(version: str) -> tuple[int, int, int, str]:
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0, version)
    major, stage, minor = int(match.group(1)), match.group(2), int(match.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, "")

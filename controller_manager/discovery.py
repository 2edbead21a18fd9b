"""Which resources the apiserver serves right now (built-in and custom), read from discovery the
way upstream's ServerPreferredResources does: each group's preferred version, no subresources.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from services.client import ApiError, Client
from services.client.rest import GVR


@dataclass(frozen=True)
class APIResource:
    gvr: GVR
    kind: str
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.gvr.group}/{self.gvr.version}" if self.gvr.group else self.gvr.version

    def supports(self, *verbs: str) -> bool:
        return all(v in self.verbs for v in verbs)


@dataclass
class Discovery:
    resources: list[APIResource] = field(default_factory=list)
    #: group versions that could not be read, with the error
    failed: dict[str, str] = field(default_factory=dict)

    def by_kind(self) -> dict[tuple[str, str], APIResource]:
        """(group, kind) -> resource, to resolve an ownerReference of any version of the group."""
        return {(r.gvr.group, r.kind): r for r in self.resources}


async def _group_version(client: Client, path: str, group: str, version: str) -> list[APIResource]:
    doc = await client.request("GET", path)
    out = []
    for res in doc.get("resources") or []:
        name = res.get("name", "")
        if "/" in name:
            continue
        out.append(APIResource(GVR(group, version, name, bool(res.get("namespaced"))),
                               res.get("kind", ""), frozenset(res.get("verbs") or ())))
    return out


async def discover(client: Client) -> Discovery:
    """Every resource of every group's preferred version; a failing group version is recorded, not fatal."""
    core = await client.request("GET", "/api")
    groups = await client.request("GET", "/apis")
    targets: list[tuple[str, str, str]] = [("", v, f"/api/{v}") for v in (core.get("versions") or ["v1"])[:1]]
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("version") or (
            (group.get("versions") or [{}])[0].get("version"))
        if preferred:
            targets.append((group["name"], preferred, f"/apis/{group['name']}/{preferred}"))
    results = await asyncio.gather(
        *(_group_version(client, path, g, v) for g, v, path in targets), return_exceptions=True
    )
    found = Discovery()
    for (group, version, _), result in zip(targets, results, strict=True):
        if isinstance(result, (ApiError, httpx.HTTPError)):
            found.failed[f"{group}/{version}" if group else version] = str(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            found.resources.extend(result)
    return found

"""The ResourceQuota admission plugin: a create is admitted only after its usage has been added to
`status.used` of every quota that tracks it, with a compare-and-swap on each quota, so concurrent
creates, on this apiserver or another, can never both take the last unit.

Like upstream, a quota takes part once the quota controller has filled in `status.hard`; one whose
`status.used` lacks a tracked resource refuses creates until the controller has counted it. Usage
freed by deletions comes back when the controller recalculates, never here.

Unlike upstream, which reads quotas from an informer, the quotas of a namespace are read from etcd:
a create that follows a status write always sees it, so the watch cache's lag can neither let a
create through a quota the controller has just counted nor make the swap fail for nothing. The
watch cache only tells namespaces without quotas apart, which is all most creates need.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import zlib

import orjson

from apiserver.admission.interfaces import Attributes, Obj, PluginConfig, ValidationInterface
from apiserver.storage.cache import decode
from apiserver.storage.etcd import RevisionMismatch
from services.api import errors
from services.api import quota as q
from services.api.catalog import Resource

#: how many times a create re-checks quotas that another writer changed under it (upstream: 3)
MAX_CONFLICT_RETRIES = 10
LOCK_STRIPES = 64


class ResourceQuota(ValidationInterface):
    """Charges creates to the quotas of their namespace."""

    name = "ResourceQuota"

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.cache = config.cache
        self.prefix = f"{config.root}resourcequotas/"
        # Creates in one namespace take turns here, so they do not all lose the same swap; other
        # apiservers are kept out by the swap itself.
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]

    def handles(self, res: Resource) -> bool:
        return res.namespaced and q.evaluator_for(res.group, res.plural) is not None

    async def validate(self, a: Attributes) -> None:
        """Refuse the create with 403 when a quota would be exceeded; otherwise charge it (unless dry run)."""
        namespace = a.namespace
        if not namespace or not self._has_quotas(namespace):
            return
        res, obj, dry_run = a.resource, a.obj, a.dry_run
        evaluator = q.evaluator_for(res.group, res.plural)
        if evaluator is None:
            return
        async with self._locks[zlib.crc32(namespace.encode()) % LOCK_STRIPES]:
            quotas = await self._quotas(namespace)
            for _ in range(MAX_CONFLICT_RETRIES):
                charges = self._check(res, evaluator, quotas, obj)
                if dry_run or not charges:
                    return
                quotas = await self._charge(charges)
                if not quotas:
                    return
        name = next(iter(quotas))
        raise errors.conflict("resourcequotas", "", name.rpartition("/")[2], errors.STALE_WRITE)

    # -- reading quotas --------------------------------------------------------------------------

    def _has_quotas(self, namespace: str) -> bool:
        cache = self.cache.resources.get(self.prefix)
        if cache is None:
            return False
        start = f"{self.prefix}{namespace}/"
        keys = cache.sorted_keys()
        i = bisect.bisect_left(keys, start)
        return i < len(keys) and keys[i].startswith(start)

    async def _quotas(self, namespace: str) -> dict[str, tuple[Obj, int]]:
        """The namespace's quotas by key with their revisions, as etcd has them now."""
        kvs, _, _ = await self.cache.store.list(f"{self.prefix}{namespace}/")
        return {kv.key: (decode(kv.value, kv.mod_revision), kv.mod_revision) for kv in kvs}

    # -- checking and charging -------------------------------------------------------------------

    def _check(self, res: Resource, evaluator: q.Evaluator, quotas: dict[str, tuple[Obj, int]],
               obj: Obj) -> dict[str, tuple[Obj, int, q.ResourceList]]:
        """The quotas whose status.used changes, with the new usage; 403 when one would be exceeded."""
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName") or ""

        def forbid(message: str) -> errors.StatusError:
            return errors.forbidden(res.plural, res.group, name, message)

        interesting: list[str] = []
        for key, (quota, _) in quotas.items():
            if not q.matches(quota, evaluator, obj):
                continue
            quota_name = quota["metadata"].get("name", "")
            tracked = evaluator.matching_resources(q.status_hard(quota))
            lacking = evaluator.constraints(tracked, obj)
            if lacking:
                raise forbid(f"failed quota: {quota_name}: {lacking}")
            if not q.has_usage_stats(quota, tracked):
                raise forbid(f"status unknown for quota: {quota_name}, resources: {','.join(sorted(tracked))}")
            interesting.append(key)
        if not interesting:
            return {}
        delta = evaluator.usage(obj)
        bad = q.negative(delta)
        if bad:
            raise forbid(f"quota usage is negative for resource(s): {','.join(bad)}")
        if q.is_zero(delta):
            return {}
        charges: dict[str, tuple[Obj, int, q.ResourceList]] = {}
        for key in interesting:
            quota, revision = quotas[key]
            hard, used = q.status_hard(quota), q.status_used(quota)
            requested = q.mask(delta, hard)
            new_used = q.add(used, requested)
            over = q.exceeded(q.mask(new_used, requested), hard)
            if over:
                quota_name = quota["metadata"].get("name", "")
                raise forbid(
                    f"exceeded quota: {quota_name}, requested: {q.pretty(q.mask(requested, over))}, "
                    f"used: {q.pretty(q.mask(used, over))}, limited: {q.pretty(q.mask(hard, over))}"
                )
            if not q.equals(new_used, used):
                charges[key] = (quota, revision, new_used)
        return charges

    async def _charge(self, charges: dict[str, tuple[Obj, int, q.ResourceList]]) -> dict[str, tuple[Obj, int]]:
        """Write the new usage of each quota; the current state of those another writer changed first."""
        lost: dict[str, tuple[Obj, int]] = {}
        for key, (quota, revision, used) in charges.items():
            new = copy.deepcopy(quota)
            new.setdefault("status", {})["used"] = used
            new["metadata"].pop("resourceVersion", None)
            try:
                await self.cache.store.update(key, orjson.dumps(new), revision)
            except RevisionMismatch as exc:
                if exc.current is not None:
                    lost[key] = (decode(exc.current.value, exc.current.mod_revision), exc.current.mod_revision)
        return lost

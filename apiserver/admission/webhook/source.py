"""The webhook configurations admission calls, read from the apiserver's watch cache (upstream's
configuration manager, fed by an informer).

The cache already follows etcd for every resource; this source turns what it holds into compiled
webhooks (matchConditions parsed once, defaults applied), rebuilt only when the cache's copy of the
configurations changed since the last request asked. Configurations run in name order, and each
one's webhooks in their listed order, as upstream sorts them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from apiserver.registry import crcel
from apiserver.registry.admissionregistration import CONDITION_VARIABLES, default_webhook
from apiserver.storage.cache import ResourceCache, WatchCache

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Condition:
    name: str
    #: the compiled expression, or None with `error` when it does not compile (stored before validation
    #: knew it, or by another apiserver version)
    program: crcel.Program | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Webhook:
    """One webhook of one configuration, defaulted and ready to match."""

    configuration: str
    name: str
    spec: Obj
    conditions: tuple[Condition, ...]

    @property
    def failure_policy(self) -> str:
        return self.spec.get("failurePolicy") or "Fail"

    @property
    def reinvoke_if_needed(self) -> bool:
        return self.spec.get("reinvocationPolicy") == "IfNeeded"

    @property
    def side_effects(self) -> str:
        return self.spec.get("sideEffects") or "Unknown"

    @property
    def timeout(self) -> int:
        return int(self.spec.get("timeoutSeconds") or 10)


def _compile(configuration: str, spec: Obj, mutating: bool) -> Webhook:
    spec = copy.deepcopy(spec)
    default_webhook(spec, mutating)
    conditions = []
    for cond in spec.get("matchConditions") or []:
        program, error = crcel.check_expression(str(cond.get("expression") or ""), CONDITION_VARIABLES)
        conditions.append(Condition(str(cond.get("name") or ""), program, error))
    return Webhook(configuration, str(spec.get("name") or ""), spec, tuple(conditions))


def fingerprint(cache: ResourceCache) -> tuple[int, int, int]:
    """What changes whenever the cache's objects do: its last change, where its history starts, its size."""
    last = cache.history[-1].revision if cache.history else 0
    return (last, cache.history_start, len(cache.entries))


class ConfigurationSource:
    """The webhooks of every Mutating- or ValidatingWebhookConfiguration, in calling order."""

    def __init__(self, cache: WatchCache, root: str, plural: str, mutating: bool) -> None:
        self.prefix = f"{root}{plural}/"
        self._watch_cache = cache
        self._cache: ResourceCache | None = None
        self.mutating = mutating
        self._seen: tuple[int, int, int] | None = None
        self._hooks: tuple[Webhook, ...] = ()

    def _resource_cache(self) -> ResourceCache | None:
        if self._cache is None:
            self._cache = self._watch_cache.resources.get(self.prefix)
        return self._cache

    def webhooks(self) -> tuple[Webhook, ...]:
        """The current webhooks; cheap when nothing changed (the common case: none at all)."""
        cache = self._resource_cache()
        if cache is None or not cache.entries:
            self._hooks, self._seen = (), None
            return ()
        seen = fingerprint(cache)
        if seen != self._seen:
            configs = sorted((e.obj for e in cache.entries.values()), key=lambda o: o["metadata"]["name"])
            self._hooks = tuple(_compile(c["metadata"]["name"], hook, self.mutating)
                                for c in configs for hook in c.get("webhooks") or [] if isinstance(hook, dict))
            self._seen = seen
        return self._hooks

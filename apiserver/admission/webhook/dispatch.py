"""Calling the webhooks that match a request, as upstream's generic webhook dispatchers do: mutating ones
one after the other, each seeing the previous one's patch (and IfNeeded ones once more when a later
webhook changed the object), validating ones all at once; each with its failurePolicy, sideEffects and
timeout, their warnings and audit annotations handed back to the request.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from prometheus_client import Counter, Histogram

from apiserver.admission import request
from apiserver.admission.interfaces import DELETE, Attributes, PluginConfig
from apiserver.admission.lookup import namespace_object
from apiserver.admission.webhook import matching, review
from apiserver.admission.webhook.client import CallError, WebhookClient
from apiserver.admission.webhook.resolver import ResolveError, ServiceResolver
from apiserver.admission.webhook.source import ConfigurationSource, Webhook
from apiserver.registry import crcel
from apiserver.registry.strategies import strategy_for
from services.api import errors
from services.api.catalog import Resource
from services.api.patch import PatchError, json_patch

log = structlog.get_logger("admission.webhook")

Obj = dict[str, Any]

_SIDE_EFFECT_FREE_ON_DRY_RUN = ("None", "NoneOnDryRun")

#: upstream's webhook metrics (k8s.io/apiserver/pkg/admission/metrics), same names, labels and buckets
DURATION = Histogram("apiserver_admission_webhook_admission_duration_seconds",
                     "Admission webhook latency in seconds, identified by name and broken out for each operation "
                     "and API resource and type (validate or admit).", ["name", "type", "operation", "rejected"],
                     buckets=(0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25))
REJECTIONS = Counter("apiserver_admission_webhook_rejection_count",
                     "Admission webhook rejection count, identified by name and broken out for each admission type "
                     "(validating or admit) and operation.", ["name", "type", "operation", "error_type",
                                                              "rejection_code"])
FAIL_OPEN = Counter("apiserver_admission_webhook_fail_open_count",
                    "Admission webhook fail open count, identified by name and broken out for each admission type "
                    "(validating or mutating).", ["name", "type"])


@dataclass(frozen=True, slots=True)
class _Call:
    """A webhook chosen for this request, and the resource its rules see it as."""

    hook: Webhook
    seen_as: Resource
    index: int


class Dispatcher:
    """Matches and calls the webhooks of one kind of configuration."""

    def __init__(self, config: PluginConfig, plural: str, mutating: bool) -> None:
        self.config = config
        self.mutating = mutating
        self.phase = "mutating" if mutating else "validating"
        #: the step type upstream's metrics label the webhook calls with
        self.step = "admit" if mutating else "validating"
        self.source = ConfigurationSource(config.cache, config.root, plural, mutating)
        self.resolver = ServiceResolver(config.cache, config.root)
        self.client = WebhookClient()

    async def _namespace_labels(self, namespace: str) -> dict[str, str]:
        ns = await namespace_object(self.config, namespace)
        return dict(((ns or {}).get("metadata") or {}).get("labels") or {})

    async def _selected(self, hooks: tuple[Webhook, ...], a: Attributes) -> list[_Call]:
        """The webhooks whose rules and selectors take this request, in calling order."""
        chosen: list[_Call] = []
        labels: dict[str, dict[str, str]] = {}
        for index, hook in enumerate(hooks):
            spec = hook.spec
            seen_as = matching.matched_resource(spec.get("rules") or [], spec.get("matchPolicy"), a,
                                                self.config.catalog)
            if seen_as is None or not matching.object_selected(spec.get("objectSelector"), a):
                continue
            selector = spec.get("namespaceSelector")
            namespace = matching.namespace_labels_needed(selector, a)
            if namespace is not None and namespace not in labels:
                labels[namespace] = await self._namespace_labels(namespace)
            if not matching.namespace_selected(selector, a, labels.get(namespace or "")):
                continue
            chosen.append(_Call(hook, seen_as, index))
        return chosen

    def _refuse_dry_run(self, calls: list[_Call], a: Attributes) -> None:
        if not a.dry_run:
            return
        for call in calls:
            if call.hook.side_effects not in _SIDE_EFFECT_FREE_ON_DRY_RUN:
                raise review.no_dry_run(call.hook.name)

    async def _call(self, call: _Call, a: Attributes, round_: int) -> review.Verdict | None:
        """One webhook's checked answer; None when it is skipped (its conditions are false, or it failed
        open). A denial or a fail-closed failure raises the StatusError the client gets."""
        started = time.perf_counter()
        rejected = "false"
        try:
            return await self._call_once(call, a, round_)
        except errors.StatusError as exc:
            rejected = "true"
            error_type = "calling_webhook_error" if exc.reason == "InternalError" else "no_error"
            REJECTIONS.labels(call.hook.name, self.step, a.operation, error_type, str(exc.code)).inc()
            raise
        finally:
            DURATION.labels(call.hook.name, self.step, a.operation, rejected).observe(time.perf_counter() - started)

    async def _call_once(self, call: _Call, a: Attributes, round_: int) -> review.Verdict | None:
        hook, ctx = call.hook, request.current()
        version = review.review_version(hook.spec.get("admissionReviewVersions"))
        body = review.request(a, call.seen_as, ctx.user, version, self.config.catalog)
        bound = log.bind(webhook=hook.name, configuration=hook.configuration, kind=a.resource.kind,
                         namespace=a.namespace, name=a.name, operation=a.operation)
        try:
            if hook.conditions:
                sent = body["request"]
                activation = {"object": crcel.admission_value(sent["object"]),
                              "oldObject": crcel.admission_value(sent["oldObject"]),
                              "request": crcel.admission_value(review.cel_request(body))}
                try:
                    if not matching.conditions_hold(hook.conditions, activation):
                        return None
                except matching.MatchConditionError as exc:
                    raise CallError(f"failed to evaluate match conditions: {exc}") from exc
            where = self.resolver.resolve(hook.spec.get("clientConfig") or {}, hook.timeout)
            ca = str((hook.spec.get("clientConfig") or {}).get("caBundle") or "")
            answer = await self.client.post(where, ca, orjson.dumps(body), hook.timeout)
            result = review.verdict(answer, body["request"]["uid"], version)
            result.sent = body["request"]["object"]
            if result.patch and not self.mutating:
                raise review.BadResponse("validating webhook may not return a patch")
        except (CallError, ResolveError, review.BadResponse) as exc:
            why = str(exc) if not isinstance(exc, ResolveError) else \
                f"failed to call webhook: Post \"{_shown(hook)}\": {exc}"
            if hook.failure_policy == "Ignore":
                bound.warning("webhook failed, failing open", error=why)
                FAIL_OPEN.labels(hook.name, self.step).inc()
                ctx.annotate(f"failed-open.{self.phase}.webhook.admission.k8s.io/round_{round_}_index_{call.index}",
                             hook.name)
                return None
            bound.warning("webhook failed, failing closed", error=why)
            raise review.call_failed(hook.name, why) from exc
        for text in result.warnings:
            ctx.warn(text)
        for key, value in result.audit_annotations.items():
            ctx.annotate(f"{hook.name}/{key}", value)
        if not result.allowed:
            raise review.denied(hook.name, result.status)
        return result

    async def mutate(self, a: Attributes) -> None:
        """Call the matching mutating webhooks in order and apply their patches to `a.obj`. When the chain
        runs again (a webhook changed the object), call only the IfNeeded webhooks that saw an object
        something changed since."""
        hooks = self.source.webhooks()
        if not hooks:
            return
        if a.operation == DELETE:
            # A delete's mutating phase has no object to patch (upstream's has none either): the webhooks
            # may refuse it, their patches have nothing to apply to.
            a = dataclasses.replace(a, obj=None)
        calls = await self._selected(hooks, a)
        if not calls:
            return
        if a.obj is None:
            self._refuse_dry_run(calls, a)
            for call in calls:
                await self._call(call, a, 0)
            return
        ctx = request.current()
        reinvocation = a.reinvocation
        if reinvocation.again:
            seen: dict[int, bytes] = reinvocation.memory.get(self.phase) or {}
            now = orjson.dumps(a.obj) if seen else b""
            for call in calls:
                if call.index in seen and seen[call.index] != now:
                    await self._mutate_once(call, a, 1, ctx)
            return
        self._refuse_dry_run(calls, a)
        # Upstream decodes (and so defaults) a request before admission: webhooks see a defaulted object.
        strategy_for(a.resource).defaults(a.obj)
        after: dict[int, bytes] = {}
        for call in calls:
            changed = await self._mutate_once(call, a, 0, ctx)
            if changed:
                reinvocation.requested = True
            if call.hook.reinvoke_if_needed and changed is not None:
                after[call.index] = orjson.dumps(a.obj)
        reinvocation.memory[self.phase] = after

    async def _mutate_once(self, call: _Call, a: Attributes, round_: int,
                           ctx: request.Request) -> bool | None:
        """Call one mutating webhook; whether it changed the object, None when it was not called."""
        result = await self._call(call, a, round_)
        if result is None:
            return None
        mutated = False
        if result.patch:
            mutated = self._apply(call, a, result)
        ctx.annotate(f"mutation.webhook.admission.k8s.io/round_{round_}_index_{call.index}",
                     orjson.dumps({"configuration": call.hook.configuration, "webhook": call.hook.name,
                                   "mutated": mutated}).decode())
        return mutated

    def _apply(self, call: _Call, a: Attributes, result: review.Verdict) -> bool:
        """Apply a webhook's base64 JSONPatch to the object it was sent and put the outcome, in the version
        `a.obj` is in, into `a.obj`; upstream answers a bad patch with a 500."""
        hook, obj = call.hook, a.obj if a.obj is not None else {}
        sent = result.sent if result.sent is not None else obj
        try:
            operations = orjson.loads(base64.b64decode(result.patch))
            patched = json_patch(sent, operations)
        except (ValueError, orjson.JSONDecodeError, PatchError) as exc:
            raise errors.internal(f'admission webhook "{hook.name}" returned an invalid patch: {exc}') from exc
        if not isinstance(patched, dict):
            raise errors.internal(f'admission webhook "{hook.name}" returned a patch that is not an object')
        if patched == sent:
            return False
        if sent is not obj:
            form = self.config.catalog.by_kind(str(obj.get("apiVersion")), str(obj.get("kind"))) \
                if self.config.catalog is not None else None
            if form is not None:
                patched = review.in_version(patched, form, self.config.catalog) or patched
        obj.clear()
        obj.update(patched)
        return True

    async def validate(self, a: Attributes) -> None:
        """Call the matching validating webhooks concurrently; the first refusal, in calling order, wins."""
        hooks = self.source.webhooks()
        if not hooks:
            return
        calls = await self._selected(hooks, a)
        if not calls:
            return
        self._refuse_dry_run(calls, a)
        results = await asyncio.gather(*(self._call(call, a, 0) for call in calls), return_exceptions=True)
        for outcome in results:
            if isinstance(outcome, BaseException):
                raise outcome


def _shown(hook: Webhook) -> str:
    """The URL of a webhook as upstream's error messages show it, when it could not be resolved."""
    config = hook.spec.get("clientConfig") or {}
    if config.get("url"):
        return f"{config['url']}?timeout={hook.timeout}s"
    ref = config.get("service") or {}
    return (f"https://{ref.get('name')}.{ref.get('namespace')}.svc:{ref.get('port') or 443}"
            f"{ref.get('path') or '/'}?timeout={hook.timeout}s")

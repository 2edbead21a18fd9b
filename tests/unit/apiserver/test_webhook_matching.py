"""Webhook matching and AdmissionReview handling without a network: upstream's rule semantics (`*`,
subresources, scope), matchPolicy Equivalent, selectors, matchConditions, the answers a webhook may
give and the errors the client then gets."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from apiserver.admission.interfaces import CREATE, DELETE, UPDATE, Attributes, PluginConfig
from apiserver.admission.webhook import matching, review
from apiserver.admission.webhook.dispatch import Dispatcher
from apiserver.admission.webhook.resolver import ResolveError, ServiceResolver
from apiserver.admission.webhook.source import ConfigurationSource, _compile
from apiserver.storage.cache import Entry, ResourceCache
from services.api.catalog import BUILTIN, Catalog
from services.api.errors import StatusError


def res(group: str, plural: str, version: str | None = None) -> Any:
    return next(r for r in BUILTIN if r.group == group and r.plural == plural and version in (None, r.version))


def hook(**spec: Any) -> Any:
    base = {"name": "h.pyk8s.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]}
    return _compile("config", {**base, **spec}, mutating=True)


def pod(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": labels}}


@pytest.mark.parametrize(("resources", "plural", "sub", "want"), [
    (["pods"], "pods", "", True),
    (["pods"], "pods", "status", False),
    (["*"], "pods", "", True),
    (["*"], "pods", "status", False),
    (["pods/*"], "pods", "status", True),
    (["pods/*"], "pods", "", True),  # upstream: a `*` subresource also matches the resource itself
    (["*/status"], "deployments", "status", True),
    (["*/*"], "pods", "", True),
    (["*/*"], "pods", "eviction", True),
    (["pods/status"], "pods", "status", True),
])
def test_resources_and_subresources(resources: list[str], plural: str, sub: str, want: bool) -> None:
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "resources": resources, "operations": ["*"]}
    target = res("apps", plural) if plural == "deployments" else res("", plural)
    assert matching.rule_matches(rule, UPDATE, target, sub) is want


def test_operations_groups_versions_and_scope() -> None:
    rule = {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["*"], "operations": ["CREATE", "DELETE"]}
    assert matching.rule_matches(rule, CREATE, res("apps", "deployments"), "")
    assert not matching.rule_matches(rule, UPDATE, res("apps", "deployments"), "")
    assert not matching.rule_matches(rule, CREATE, res("", "pods"), "")
    every = {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}
    assert matching.rule_matches({**every, "scope": "Namespaced"}, CREATE, res("", "pods"), "")
    assert not matching.rule_matches({**every, "scope": "Namespaced"}, CREATE, res("", "namespaces"), "")
    assert matching.rule_matches({**every, "scope": "Cluster"}, CREATE, res("", "namespaces"), "")
    assert not matching.rule_matches({**every, "scope": "Cluster"}, CREATE, res("", "configmaps"), "")


def test_match_policy_equivalent_finds_the_other_version() -> None:
    catalog = Catalog()
    v2_only = [{"apiGroups": ["autoscaling"], "apiVersions": ["v2"], "resources": ["horizontalpodautoscalers"],
                "operations": ["CREATE"]}]
    v1 = res("autoscaling", "horizontalpodautoscalers", "v1")
    a = Attributes(v1, CREATE, {"metadata": {"name": "h", "namespace": "ns"}})
    seen = matching.matched_resource(v2_only, "Equivalent", a, catalog)
    assert seen is not None and seen.version == "v2"
    assert matching.matched_resource(v2_only, "Exact", a, catalog) is None
    hpa = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "h", "namespace": "ns"},
           "spec": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 50,
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}}
    a = Attributes(v1, CREATE, hpa)
    body = review.request(a, seen, None, catalog=catalog)["request"]
    assert body["resource"]["version"] == "v2" and body["requestResource"]["version"] == "v1"
    # The object is sent as the version the rules name.
    assert body["object"]["apiVersion"] == "autoscaling/v2"
    assert body["object"]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 50


def test_selectors() -> None:
    pods = res("", "pods")
    selected = {"matchLabels": {"app": "web"}}
    assert matching.object_selected(selected, Attributes(pods, CREATE, pod(app="web")))
    assert not matching.object_selected(selected, Attributes(pods, CREATE, pod(app="db")))
    # Either object may match; on a delete only the old one is there.
    assert matching.object_selected(selected, Attributes(pods, UPDATE, pod(app="db"), pod(app="web")))
    assert matching.object_selected(selected, Attributes(pods, DELETE, None, pod(app="web")))
    ns_hook = {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}
    a = Attributes(pods, CREATE, pod())
    assert matching.namespace_labels_needed(ns_hook, a) == "ns"
    assert matching.namespace_selected(ns_hook, a, {"env": "prod"})
    assert not matching.namespace_selected(ns_hook, a, {"env": "dev"})
    namespace = {"metadata": {"name": "ns", "labels": {"env": "prod"}}}
    a = Attributes(res("", "namespaces"), CREATE, namespace)
    assert matching.namespace_labels_needed(ns_hook, a) is None and matching.namespace_selected(ns_hook, a, None)
    cluster = Attributes(res("", "nodes"), CREATE, {"metadata": {"name": "n"}})
    assert matching.namespace_selected(ns_hook, cluster, None)


def test_match_conditions_false_wins_over_errors() -> None:
    conds = [{"name": "broken", "expression": "object.nothere == 1"},
             {"name": "named", "expression": "object.metadata.name == 'p'"}]
    h = hook(matchConditions=conds)
    act = {"object": matching.crcel.admission_value(pod()), "oldObject": None, "request": None}
    with pytest.raises(matching.MatchConditionError, match="expression 'broken' resulted in error: no such key"):
        matching.conditions_hold(h.conditions, act)
    act["object"] = matching.crcel.admission_value({**pod(), "metadata": {"name": "q"}})
    assert matching.conditions_hold(h.conditions, act) is False


def test_configurations_are_exempt() -> None:
    assert matching.exempt(res("admissionregistration.k8s.io", "mutatingwebhookconfigurations"))
    assert not matching.exempt(res("", "pods"))


def test_answers_and_denials() -> None:
    ok = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "response": {"uid": "u", "allowed": True, "warnings": ["w"], "auditAnnotations": {"k": "v"}}}
    verdict = review.verdict(ok, "u")
    assert verdict.allowed and verdict.warnings == ["w"] and verdict.audit_annotations == {"k": "v"}
    with pytest.raises(review.BadResponse, match='expected response.uid="u", got "x"'):
        review.verdict({**ok, "response": {"uid": "x", "allowed": True}}, "u")
    with pytest.raises(review.BadResponse, match="expected webhook response of admission.k8s.io/v1"):
        review.verdict({**ok, "apiVersion": "admission.k8s.io/v1beta2"}, "u")
    with pytest.raises(review.BadResponse, match="patchType"):
        review.verdict({**ok, "response": {"uid": "u", "allowed": True, "patch": "W10="}}, "u")
    assert review.review_version(["v1beta1", "v1"]) == "admission.k8s.io/v1beta1"
    assert review.review_version(["v2", "v1"]) == "admission.k8s.io/v1"
    assert review.verdict({**ok, "apiVersion": "admission.k8s.io/v1beta1"}, "u", "admission.k8s.io/v1beta1").allowed
    err = review.denied("h.pyk8s.io", {"code": 200, "message": "no"})
    assert err.code == 400 and err.message == 'admission webhook "h.pyk8s.io" denied the request: no'
    assert "reason" not in err.to_status()
    err = review.denied("h.pyk8s.io", {"reason": "Forbidden", "code": 403})
    assert (err.code, err.reason, err.message) == (403, "Forbidden", 'admission webhook "h.pyk8s.io" denied the '
                                                                     "request: Forbidden")
    err = review.denied("h.pyk8s.io", None)
    assert err.message == 'admission webhook "h.pyk8s.io" denied the request without explanation'


def _dispatcher(entries: dict[str, Any]) -> Dispatcher:
    store = SimpleNamespace(entries=entries, history=[], history_start=1)
    cache = SimpleNamespace(resources={"/registry/mutatingwebhookconfigurations/": store})
    return Dispatcher(PluginConfig(cache, "/registry/"), "mutatingwebhookconfigurations", True)  # type: ignore[arg-type]


def test_dry_run_is_refused_for_webhooks_with_side_effects() -> None:
    config = {"metadata": {"name": "c"}, "webhooks": [hook(sideEffects="Unknown").spec]}
    dispatcher = _dispatcher({"k": SimpleNamespace(obj=config)})
    a = Attributes(res("", "pods"), CREATE, pod(), dry_run=True)
    with pytest.raises(StatusError) as exc:
        asyncio.run(dispatcher.mutate(a))
    assert exc.value.code == 400
    assert exc.value.message == 'admission webhook "h.pyk8s.io" does not support dry run'


def test_source_rebuilds_only_when_the_cache_changed() -> None:
    entries = {"k": SimpleNamespace(obj={"metadata": {"name": "b"}, "webhooks": [hook().spec]})}
    store = SimpleNamespace(entries=entries, history=[], history_start=1)
    source = ConfigurationSource(SimpleNamespace(resources={"/r/x/": store}), "/r/", "x", True)  # type: ignore[arg-type]
    first = source.webhooks()
    assert [h.configuration for h in first] == ["b"] and source.webhooks() is first
    entries["j"] = SimpleNamespace(obj={"metadata": {"name": "a"}, "webhooks": [hook(name="a.pyk8s.io").spec]})
    store.history.append(SimpleNamespace(revision=5))
    assert [h.name for h in source.webhooks()] == ["a.pyk8s.io", "h.pyk8s.io"]


def _cache(objects: dict[str, list[dict[str, Any]]]) -> Any:
    resources = {}
    for prefix, objs in objects.items():
        store = ResourceCache(prefix)
        for obj in objs:
            meta = obj["metadata"]
            store.entries[f"{prefix}{meta['namespace']}/{meta['name']}"] = Entry(obj, 1)
        resources[prefix] = store
    return SimpleNamespace(resources=resources)


def test_service_resolution_through_endpointslices() -> None:
    svc = {"metadata": {"name": "hook", "namespace": "ns"}, "spec": {"ports": [{"name": "https", "port": 443}]}}
    ext = {"metadata": {"name": "ext", "namespace": "ns"}, "spec": {"type": "ExternalName",
                                                                    "externalName": "hooks.example.com"}}

    def es(name: str, ns: str, service: str, ready: bool, address: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
                "ports": [{"name": "https", "port": 8443}],
                "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}]}

    cache = _cache({"/r/services/specs/": [svc, ext], "/r/endpointslices/": [
        es("a", "ns", "hook", False, "10.0.0.1"), es("b", "ns", "hook", True, "10.0.0.2"),
        es("c", "other", "hook", True, "10.9.9.9"), es("d", "ns", "else", True, "10.0.0.3")]})
    resolver = ServiceResolver(cache, "/r/")  # type: ignore[arg-type]
    where = resolver.resolve({"service": {"namespace": "ns", "name": "hook", "path": "/m"}}, 5)
    assert (where.url, where.shown, where.server_name) == ("https://10.0.0.2:8443/m?timeout=5s",
                                                           "https://hook.ns.svc:443/m?timeout=5s", "hook.ns.svc")
    assert resolver.resolve({"service": {"namespace": "ns", "name": "ext"}}, 5).url == \
        "https://hooks.example.com:443/?timeout=5s"
    for ref, message in ((("ns", "gone", 443), 'service "gone" not found'),
                         (("ns", "hook", 444), 'no service port 444 found for service "hook"')):
        with pytest.raises(ResolveError, match=message):
            resolver.resolve({"service": {"namespace": ref[0], "name": ref[1], "port": ref[2]}}, 5)
    quiet = _cache({"/r/services/specs/": [svc], "/r/endpointslices/": [es("a", "ns", "hook", False, "10.0.0.1")]})
    with pytest.raises(ResolveError, match='no endpoints available for service "hook"'):
        ServiceResolver(quiet, "/r/").resolve({"service": {"namespace": "ns", "name": "hook"}}, 5)  # type: ignore[arg-type]
    assert resolver.resolve({"url": "https://h.example.com/x"}, 7).url == "https://h.example.com/x?timeout=7s"


def test_a_delete_reaches_mutating_webhooks_without_an_object() -> None:
    """Should the chain run the mutating phase on a delete, its webhooks get no object to patch."""
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["DELETE"]}]
    config = {"metadata": {"name": "c"}, "webhooks": [hook(rules=rules, sideEffects="Unknown").spec]}
    dispatcher = _dispatcher({"k": SimpleNamespace(obj=config)})
    seen: list[Any] = []

    async def call(call: Any, a: Attributes, round_: int) -> None:
        seen.append((a.obj, a.old))

    dispatcher._call = call  # type: ignore[method-assign]
    asyncio.run(dispatcher.mutate(Attributes(res("", "pods"), DELETE, pod(), pod())))
    assert seen == [(None, pod())]
    with pytest.raises(StatusError, match="does not support dry run"):
        asyncio.run(dispatcher.mutate(Attributes(res("", "pods"), DELETE, pod(), pod(), dry_run=True)))

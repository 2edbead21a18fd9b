"""Which IngressClass DefaultIngressClass picks, and what it leaves alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from apiserver.admission import chain
from apiserver.admission.defaultingressclass import DEFAULT_ANNOTATION, default_ingress_class
from apiserver.admission.interfaces import CREATE, UPDATE, PluginConfig
from services.api.catalog import BUILTIN

ROOT = "/registry/"


def ic(name: str, created: str = "2026-01-01T00:00:00Z", default: str | None = "true") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "annotations": {} if default is None else {DEFAULT_ANNOTATION: default}},
            "spec": {"controller": "pyk8s.io/x"}}


def ingress(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default", "annotations": annotations or {}}, "spec": spec}


def admission(*classes: dict[str, Any]) -> chain.ResourceChain:
    entries = {f"{ROOT}ingressclasses/{c['metadata']['name']}": SimpleNamespace(obj=c) for c in classes}
    cache = SimpleNamespace(resources={f"{ROOT}ingressclasses/": SimpleNamespace(entries=entries)})
    plugins = chain.build(["DefaultIngressClass"], PluginConfig(cache, ROOT))  # type: ignore[arg-type]
    return plugins.for_resource(next(r for r in BUILTIN if r.plural == "ingresses"))


def test_newest_default_then_first_name() -> None:
    assert default_ingress_class([ic("a", default=None), ic("b", default="false")]) is None
    old, new = ic("old", "2026-01-01T00:00:00Z"), ic("new", "2026-02-01T00:00:00Z")
    assert default_ingress_class([new, old])["metadata"]["name"] == "new"
    twins = [ic("zeta", "2026-02-01T00:00:00Z"), ic("alpha", "2026-02-01T00:00:00Z"), old]
    assert default_ingress_class(twins)["metadata"]["name"] == "alpha"


async def test_only_a_new_ingress_without_any_class_is_filled() -> None:
    adm = admission(ic("pyk8s"), ic("other", default=None))
    plain = ingress()
    await adm.admit(CREATE, plain, None, "", False)
    assert plain["spec"]["ingressClassName"] == "pyk8s"
    for kept in (ingress(ingressClassName=""), ingress(ingressClassName="other"),
                 ingress({"kubernetes.io/ingress.class": "nginx"})):
        before = repr(kept)
        await adm.admit(CREATE, kept, None, "", False)
        assert repr(kept) == before
    updated = ingress()
    await adm.admit(UPDATE, updated, ingress(), "", False)
    assert "ingressClassName" not in updated["spec"]
    nothing = ingress()
    await admission(ic("off", default="false")).admit(CREATE, nothing, None, "", False)
    assert "ingressClassName" not in nothing["spec"]

"""DefaultStorageClass admission (which class a claim without one gets) and the claim update rule that
lets the PersistentVolume controller assign the default class retroactively."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from apiserver.admission import chain
from apiserver.admission.interfaces import CREATE, PluginConfig
from apiserver.registry.strategies import strategy_for
from services.api.catalog import BUILTIN
from services.api.storage import default_storage_class

ROOT = "/registry/"
DEFAULT = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT = "storageclass.beta.kubernetes.io/is-default-class"


def sc(name: str, created: str = "2026-01-01T00:00:00Z", default: str | None = "true",
       annotation: str = DEFAULT) -> dict[str, Any]:
    ann = {} if default is None else {annotation: default}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "pyk8s.io/hostpath",
            "metadata": {"name": name, "creationTimestamp": created, "annotations": ann}}


def admission(*classes: dict[str, Any]) -> chain.ResourceChain:
    """The claim plugins' chain, on a cache that holds `classes`."""
    entries = {f"{ROOT}storageclasses/{c['metadata']['name']}": SimpleNamespace(obj=c) for c in classes}
    cache = SimpleNamespace(resources={f"{ROOT}storageclasses/": SimpleNamespace(entries=entries)})
    plugins = chain.build(["DefaultStorageClass", "StorageObjectInUseProtection"], PluginConfig(cache, ROOT))  # type: ignore[arg-type]
    return plugins.for_resource(pvc_resource())


def pvc_resource() -> Any:
    return next(r for r in BUILTIN if r.group == "" and r.plural == "persistentvolumeclaims")


def claim(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}}


def test_no_default_class() -> None:
    assert default_storage_class([]) is None
    assert default_storage_class([sc("a", default=None), sc("b", default="false")]) is None


def test_newest_default_wins_then_first_name() -> None:
    old, new = sc("old", "2026-01-01T00:00:00Z"), sc("new", "2026-02-01T00:00:00Z")
    plain = sc("plain", "2026-03-01T00:00:00Z", default=None)
    assert default_storage_class([old, new, plain])["metadata"]["name"] == "new"
    twins = [sc("zeta", "2026-02-01T00:00:00Z"), sc("alpha", "2026-02-01T00:00:00Z"), old]
    assert default_storage_class(twins)["metadata"]["name"] == "alpha"
    assert default_storage_class([sc("beta", annotation=BETA_DEFAULT)])["metadata"]["name"] == "beta"


async def test_admission_fills_only_a_nil_class() -> None:
    adm = admission(sc("standard"), sc("other", default=None))
    nil = claim()
    await adm.admit(CREATE, nil, None, "", False)
    assert nil["spec"]["storageClassName"] == "standard"
    assert "kubernetes.io/pvc-protection" in nil["metadata"]["finalizers"]
    empty = claim(storageClassName="")
    await adm.admit(CREATE, empty, None, "", False)
    assert empty["spec"]["storageClassName"] == ""
    named = claim(storageClassName="other")
    await adm.admit(CREATE, named, None, "", False)
    assert named["spec"]["storageClassName"] == "other"
    beta = claim()
    beta["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "other"}
    await adm.admit(CREATE, beta, None, "", False)
    assert "storageClassName" not in beta["spec"]


async def test_admission_without_default_leaves_the_claim_alone() -> None:
    body = claim()
    await admission(sc("plain", default=None)).admit(CREATE, body, None, "", False)
    assert "storageClassName" not in body["spec"]


def update_causes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    return strategy_for(pvc_resource()).validate_spec_update(new, old)


def test_update_may_set_a_nil_class_once() -> None:
    old = claim()
    new = copy.deepcopy(old)
    new["spec"]["storageClassName"] = "standard"
    assert update_causes(old, new) == []
    again = copy.deepcopy(new)
    again["spec"]["storageClassName"] = "other"
    assert [c["field"] for c in update_causes(new, again)] == ["spec"]
    empty = claim(storageClassName="")
    assert [c["field"] for c in update_causes(empty, {**empty, "spec": {**empty["spec"],
                                                                         "storageClassName": "standard"}})] == ["spec"]
    beta = claim()
    beta["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "x"}
    assert [c["field"] for c in update_causes(beta, {**beta, "spec": {**beta["spec"],
                                                                       "storageClassName": "standard"}})] == ["spec"]
    unset = copy.deepcopy(new)
    del unset["spec"]["storageClassName"]
    assert [c["field"] for c in update_causes(new, unset)] == ["spec"]

"""The admission chain: upstream's plugin order whatever the flags' order, upstream's default set and
flag errors, the plugins each resource's writes go through, and what the pod plugins add."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from apiserver.admission import chain
from apiserver.admission.alwayspullimages import AlwaysPullImages
from apiserver.admission.interfaces import CREATE, DELETE, UPDATE, Attributes, PluginConfig
from services.api.catalog import BUILTIN
from services.api.errors import StatusError

#: the relative order of the plugins pyk8s has, as upstream's AllOrderedPlugins (v1.32) lists them
UPSTREAM_ORDER = ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "NodeRestriction", "AlwaysPullImages",
                  "PodSecurity", "Priority", "DefaultTolerationSeconds", "DefaultStorageClass",
                  "StorageObjectInUseProtection", "RuntimeClass", "DefaultIngressClass", "MutatingAdmissionWebhook",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota"]
#: the plugins of UPSTREAM_ORDER upstream leaves off unless enabled (kubeadm enables NodeRestriction)
DEFAULT_OFF = ("NodeRestriction", "AlwaysPullImages")


def res(group: str, plural: str) -> Any:
    return next(r for r in BUILTIN if r.group == group and r.plural == plural)


def config() -> PluginConfig:
    return PluginConfig(SimpleNamespace(resources={}), "/registry/")  # type: ignore[arg-type]


def names(plugins: Any) -> list[str]:
    return [p.name for p in plugins]


def test_default_set_is_upstreams() -> None:
    assert chain.enabled_plugins() == [n for n in UPSTREAM_ORDER if n not in DEFAULT_OFF]


def test_order_is_upstreams_whatever_the_flags_say() -> None:
    enabled = chain.enabled_plugins(["AlwaysPullImages"], ["DefaultStorageClass"])
    assert enabled == [n for n in UPSTREAM_ORDER if n not in ("DefaultStorageClass", "NodeRestriction")]
    built = chain.build(list(reversed(UPSTREAM_ORDER)), config())
    assert names(built.plugins) == UPSTREAM_ORDER
    assert names(built.mutating) == [n for n in UPSTREAM_ORDER if n not in (
        "PodSecurity", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota")]
    assert names(built.validating) == ["LimitRanger", "AlwaysPullImages", "PodSecurity", "RuntimeClass",
                                       "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota"]
    assert [n for n in chain.ORDERED_PLUGINS if n in chain.REGISTERED] == UPSTREAM_ORDER


@pytest.mark.parametrize(("enable", "disable", "message"), [
    (["Foo"], [], 'enable-admission-plugins plugin "Foo" is unknown'),
    ([], ["ResourceQuota", "Bar"], 'disable-admission-plugins plugin "Bar" is unknown'),
    (["PodNodeSelector"], [], 'enable-admission-plugins plugin "PodNodeSelector" is not implemented by pyk8s'),
    (["AlwaysPullImages", "Priority"], ["Priority", "AlwaysPullImages"],
     "[AlwaysPullImages Priority] in enable-admission-plugins and disable-admission-plugins overlapped"),
])
def test_flag_errors(enable: list[str], disable: list[str], message: str) -> None:
    with pytest.raises(chain.UnknownPlugin) as exc:
        chain.check_flags(enable, disable)
    assert str(exc.value) == message


def test_disabling_a_plugin_pyk8s_lacks_is_fine() -> None:
    chain.check_flags([], ["NodeRestriction", "EventRateLimit"])
    assert chain.enabled_plugins([], ["EventRateLimit"]) == chain.enabled_plugins()


def test_each_resource_gets_only_its_plugins() -> None:
    built = chain.build(chain.enabled_plugins(["AlwaysPullImages"]), config())
    mw, vw = "MutatingAdmissionWebhook", ("ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook")
    pods = built.for_resource(res("", "pods"))
    assert names(pods.mutators(CREATE)) == ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "AlwaysPullImages",
                                           "Priority", "DefaultTolerationSeconds", "RuntimeClass", mw]
    assert names(pods.mutators(UPDATE)) == ["LimitRanger", "AlwaysPullImages", "Priority", "DefaultTolerationSeconds",
                                           mw]
    assert names(pods.validators(CREATE)) == ["LimitRanger", "AlwaysPullImages", "PodSecurity", "RuntimeClass", *vw,
                                             "ResourceQuota"]
    assert names(pods.validators(UPDATE)) == ["LimitRanger", "AlwaysPullImages", "PodSecurity", *vw]
    assert names(pods.validators(UPDATE, "ephemeralcontainers")) == ["PodSecurity", *vw]
    assert names(pods.mutators(UPDATE, "status")) == [mw] and names(pods.validators(UPDATE, "status")) == [*vw]
    assert names(pods.validators(DELETE)) == [*vw]
    claims = built.for_resource(res("", "persistentvolumeclaims"))
    assert names(claims.mutators(CREATE)) == ["NamespaceLifecycle", "LimitRanger", "DefaultStorageClass",
                                             "StorageObjectInUseProtection", mw]
    assert names(claims.validators(UPDATE)) == ["LimitRanger", *vw]
    volumes = built.for_resource(res("", "persistentvolumes"))
    assert names(volumes.mutators(CREATE)) == ["StorageObjectInUseProtection", mw]
    assert names(volumes.validators(CREATE)) == [*vw]
    namespaces = built.for_resource(res("", "namespaces"))
    assert names(namespaces.mutators(CREATE)) == [mw] and names(namespaces.validators(CREATE)) == ["PodSecurity", *vw]
    deployments = built.for_resource(res("apps", "deployments"))
    assert names(deployments.validators(UPDATE)) == ["PodSecurity", *vw]
    assert names(deployments.validators(UPDATE, "scale")) == [*vw]
    configmaps = built.for_resource(res("", "configmaps"))
    assert names(configmaps.mutators(CREATE)) == ["NamespaceLifecycle", mw]
    assert names(configmaps.validators(CREATE)) == [*vw, "ResourceQuota"]
    hooks = built.for_resource(res("admissionregistration.k8s.io", "validatingwebhookconfigurations"))
    assert hooks.mutators(CREATE) == () and names(hooks.validators(DELETE)) == ["ValidatingAdmissionPolicy"]
    policies = built.for_resource(res("admissionregistration.k8s.io", "validatingadmissionpolicies"))
    assert policies.mutators(CREATE) == () and policies.validators(DELETE) == ()


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}], **spec}}


async def test_pod_plugins_fill_what_upstream_admission_does() -> None:
    without_storage_reads = [n for n in chain.enabled_plugins() if n not in ("NamespaceLifecycle", "LimitRanger")]
    pods = chain.build(without_storage_reads, config()).for_resource(res("", "pods"))
    obj = pod()
    await pods.admit(CREATE, obj, None, "", False)
    spec = obj["spec"]
    assert spec["priority"] == 0 and spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert spec["serviceAccountName"] == "default"
    assert [(t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]] == [
        ("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)]
    named = pod(serviceAccount="robot")
    await pods.admit(CREATE, named, None, "", False)
    assert "serviceAccountName" not in named["spec"], "the deprecated field names the account"


async def test_priority_update_keeps_what_create_resolved() -> None:
    pods = chain.build(["Priority"], config()).for_resource(res("", "pods"))
    old = pod(priority=2000001000, preemptionPolicy="Never", priorityClassName="system-node-critical")
    new = pod(priorityClassName="system-node-critical")
    await pods.admit(UPDATE, new, old, "", False)
    assert new["spec"]["priority"] == 2000001000 and new["spec"]["preemptionPolicy"] == "Never"


async def test_always_pull_images() -> None:
    plugin = AlwaysPullImages(config())
    pods = res("", "pods")
    obj = pod(initContainers=[{"name": "i", "image": "busybox", "imagePullPolicy": "Never"}])
    await plugin.admit(Attributes(pods, CREATE, obj))
    assert [c["imagePullPolicy"] for c in obj["spec"]["initContainers"] + obj["spec"]["containers"]] == \
        ["Always", "Always"]
    await plugin.validate(Attributes(pods, CREATE, obj))

    old = pod()
    old["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    same = copy.deepcopy(old)
    await plugin.admit(Attributes(pods, UPDATE, same, old))
    await plugin.validate(Attributes(pods, UPDATE, same, old))
    assert same["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent", "no new image: left alone"

    changed = copy.deepcopy(old)
    changed["spec"]["containers"][0]["image"] = "nginx:1.26"
    with pytest.raises(StatusError) as exc:
        await plugin.validate(Attributes(pods, UPDATE, changed, old))
    assert exc.value.code == 403
    assert exc.value.message == ('pods "p" is forbidden: spec.containers[0].imagePullPolicy: Unsupported value: '
                                 '"IfNotPresent": supported values: "Always"')
    await plugin.admit(Attributes(pods, UPDATE, changed, old))
    assert changed["spec"]["containers"][0]["imagePullPolicy"] == "Always"

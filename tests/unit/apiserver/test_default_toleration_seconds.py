"""DefaultTolerationSeconds admission: pods get 300 s tolerations for the not-ready and unreachable
NoExecute taints unless they already tolerate them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from apiserver.admission.defaulttolerationseconds import DefaultTolerationSeconds
from apiserver.admission.interfaces import CREATE, Attributes, PluginConfig
from services.api.catalog import BUILTIN

NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 300}


async def admit(pod_spec: dict[str, Any], **kwargs: int) -> list[dict[str, Any]]:
    cache = SimpleNamespace(resources={})
    plugin = DefaultTolerationSeconds(PluginConfig(cache, "/registry/", **kwargs))  # type: ignore[arg-type]
    res = next(r for r in BUILTIN if r.group == "" and r.plural == "pods")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": pod_spec}
    await plugin.admit(Attributes(res, CREATE, pod))
    return pod["spec"].get("tolerations") or []


async def test_plain_pod_gets_both() -> None:
    assert await admit({"containers": [{"name": "c", "image": "x"}]}) == [NOT_READY, UNREACHABLE]


async def test_flags_set_the_seconds() -> None:
    out = await admit({"containers": []}, not_ready_toleration_seconds=10, unreachable_toleration_seconds=20)
    assert [t["tolerationSeconds"] for t in out] == [10, 20]


async def test_existing_tolerations_are_kept_and_respected() -> None:
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
           "tolerationSeconds": 2}
    assert await admit({"tolerations": [own]}) == [own, NOT_READY]
    everything = {"operator": "Exists"}
    assert await admit({"tolerations": [everything]}) == [everything]
    no_schedule = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    assert await admit({"tolerations": [no_schedule]}) == [no_schedule, NOT_READY, UNREACHABLE]

"""Strategic merge patch against upstream's semantics, on real kinds and their published schema."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from services.api.patch import PatchError
from services.api.strategic import UnsupportedStrategicPatch, strategic_merge_patch


def container(name: str, image: str = "nginx:1", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": list(containers), **spec},
    }


def deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container("web")]}},
            **spec,
        },
    }


def smp_pod(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return strategic_merge_patch("v1", "Pod", original, patch)


def names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


# ---------------------------------------------------------------------------------------------
# Maps


def test_maps_merge_recursively_and_null_deletes() -> None:
    original = pod(container("a"))
    original["metadata"]["annotations"] = {"keep": "1", "drop": "2"}
    result = smp_pod(original, {"metadata": {"labels": {"tier": "fe"}, "annotations": {"drop": None}}})
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    assert result["metadata"]["annotations"] == {"keep": "1"}
    assert result["spec"] == original["spec"]


def test_null_for_a_missing_key_and_nulls_inside_new_values_are_not_stored() -> None:
    result = smp_pod(pod(container("a")), {"metadata": {"annotations": {"a": "1", "b": None}, "gone": None}})
    assert result["metadata"]["annotations"] == {"a": "1"}
    assert "gone" not in result["metadata"]


def test_patch_replace_on_a_map_replaces_it() -> None:
    original = pod(container("a"))
    patch = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    assert smp_pod(original, patch)["metadata"]["labels"] == {"only": "this"}


def test_patch_delete_on_a_map_empties_it() -> None:
    original = pod(container("a"), nodeSelector={"disk": "ssd"})
    result = smp_pod(original, {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert result["spec"]["nodeSelector"] == {}


def test_replace_strategy_on_a_map_field_replaces_the_whole_map() -> None:
    # PodDisruptionBudgetSpec.selector carries `x-kubernetes-patch-strategy: replace`.
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web", "tier": "fe"}}},
    }
    result = strategic_merge_patch(
        "policy/v1", "PodDisruptionBudget", pdb, {"spec": {"selector": {"matchLabels": {"app": "api"}}}}
    )
    assert result["spec"]["selector"] == {"matchLabels": {"app": "api"}}
    # The same patch merges into a Deployment's selector, which has no such strategy.
    merged = strategic_merge_patch(
        "apps/v1", "Deployment", deployment(), {"spec": {"selector": {"matchLabels": {"tier": "fe"}}}}
    )
    assert merged["spec"]["selector"] == {"matchLabels": {"app": "web", "tier": "fe"}}


# ---------------------------------------------------------------------------------------------
# Lists of maps with a merge key


def test_containers_merge_by_name() -> None:
    original = pod(container("a", command=["sleep"]), container("b"))
    result = smp_pod(original, {"spec": {"containers": [{"name": "b", "image": "nginx:2"}]}})
    assert result["spec"]["containers"] == [container("a", command=["sleep"]), container("b", "nginx:2")]


def test_new_container_is_added_before_the_untouched_ones_like_upstream() -> None:
    result = smp_pod(pod(container("a"), container("b")), {"spec": {"containers": [container("c")]}})
    assert names(result["spec"]["containers"]) == ["c", "a", "b"]


def test_ports_merge_by_container_port() -> None:
    original = pod(container("a", ports=[{"containerPort": 80, "protocol": "TCP"}]))
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]}
            ]
        }
    }
    ports = smp_pod(original, patch)["spec"]["containers"][0]["ports"]
    assert ports == [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}]


def test_env_merges_by_name_and_patch_delete_removes_an_element() -> None:
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]
    original = pod(container("a", env=env))
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "env": [{"name": "C", "value": "30"}, {"name": "B", "$patch": "delete"}]}
            ]
        }
    }
    result = smp_pod(original, patch)
    assert result["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "C", "value": "30"},
    ]


def test_patch_delete_of_a_missing_element_is_a_no_op() -> None:
    original = pod(container("a"), container("b"))
    result = smp_pod(original, {"spec": {"containers": [{"name": "zz", "$patch": "delete"}]}})
    assert result["spec"]["containers"] == original["spec"]["containers"]


def test_patch_replace_element_replaces_the_whole_list() -> None:
    original = pod(container("a"), container("b"))
    patch = {"spec": {"containers": [{"$patch": "replace"}, container("c", "redis")]}}
    assert smp_pod(original, patch)["spec"]["containers"] == [container("c", "redis")]


def test_set_element_order_orders_the_merged_list() -> None:
    original = pod(container("a"), container("b"), container("c"))
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "nginx:2"}],
        }
    }
    result = smp_pod(original, patch)
    assert names(result["spec"]["containers"]) == ["c", "a", "b"]
    assert result["spec"]["containers"][1]["image"] == "nginx:2"


def test_set_element_order_keeps_server_only_items_where_they_were() -> None:
    # A sidecar injected on the server is not in the applied configuration; it stays after `a`.
    original = pod(container("a"), container("sidecar"), container("b"))
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            "containers": [container("c")],
        }
    }
    assert names(smp_pod(original, patch)["spec"]["containers"]) == ["a", "sidecar", "b", "c"]


def test_owner_references_merge_by_uid_and_conditions_by_type() -> None:
    original = pod(container("a"))
    original["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True}
    ]
    original["status"] = {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]
    }
    result = smp_pod(
        original,
        {
            "metadata": {"ownerReferences": [{"uid": "u1", "blockOwnerDeletion": True}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    assert result["metadata"]["ownerReferences"][0] == {
        **original["metadata"]["ownerReferences"][0],
        "blockOwnerDeletion": True,
    }
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]


def test_service_ports_merge_by_port() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]},
    }
    result = strategic_merge_patch(
        "v1", "Service", service, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}
    )
    assert result["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443, "targetPort": 8443}]


def test_volumes_merge_by_name_and_retain_keys_switches_the_source() -> None:
    original = pod(
        container("a"),
        volumes=[{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "old"}}],
    )
    patch = {
        "spec": {
            "volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/srv"}}]
        }
    }
    result = smp_pod(original, patch)
    assert result["spec"]["volumes"] == [
        {"name": "data", "hostPath": {"path": "/srv"}},
        {"name": "cfg", "configMap": {"name": "old"}},
    ]


# ---------------------------------------------------------------------------------------------
# $retainKeys on a Deployment's strategy (a union)


def test_retain_keys_clears_rolling_update_when_switching_to_recreate() -> None:
    original = deployment(
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    )
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    result = strategic_merge_patch("apps/v1", "Deployment", original, patch)
    assert result["spec"]["strategy"] == {"type": "Recreate"}
    # Without the directive the old rollingUpdate survives the merge.
    plain = strategic_merge_patch(
        "apps/v1", "Deployment", original, {"spec": {"strategy": {"type": "Recreate"}}}
    )
    assert plain["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": "25%"}


def test_retain_keys_must_list_every_field_the_patch_sets() -> None:
    original = deployment(strategy={"type": "RollingUpdate"})
    patch = {
        "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}
    }
    with pytest.raises(PatchError) as err:
        strategic_merge_patch("apps/v1", "Deployment", original, patch)
    assert (err.value.code, err.value.message) == (400, "invalid patch format of retainKeys")


# ---------------------------------------------------------------------------------------------
# Lists of primitives and lists without a strategy


def test_finalizers_merge_as_a_union_and_delete_from_primitive_list_removes() -> None:
    original = pod(container("a"))
    original["metadata"]["finalizers"] = ["a", "b"]
    assert smp_pod(original, {"metadata": {"finalizers": ["c", "a"]}})["metadata"]["finalizers"] == [
        "c",
        "a",
        "b",
    ]
    removed = smp_pod(original, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert removed["metadata"]["finalizers"] == ["b"]


def test_delete_from_primitive_list_never_adds_a_missing_list() -> None:
    result = smp_pod(pod(container("a")), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert "finalizers" not in result["metadata"]


def test_set_element_order_on_a_primitive_list() -> None:
    original = pod(container("a"))
    original["metadata"]["finalizers"] = ["a", "b", "c"]
    patch = {"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"]}}
    assert smp_pod(original, patch)["metadata"]["finalizers"] == ["c", "b", "a"]


def test_lists_without_a_strategy_are_replaced() -> None:
    original = pod(
        container("a", args=["--a", "--b"]),
        tolerations=[{"key": "k1", "operator": "Exists"}, {"key": "k2", "operator": "Exists"}],
    )
    result = smp_pod(
        original,
        {
            "spec": {
                "tolerations": [{"key": "k3", "operator": "Exists", "value": None}],
                "containers": [{"name": "a", "args": ["--c"]}],
            }
        },
    )
    assert result["spec"]["tolerations"] == [{"key": "k3", "operator": "Exists"}]
    assert result["spec"]["containers"][0]["args"] == ["--c"]


# ---------------------------------------------------------------------------------------------
# What kubectl sends


def test_kubectl_apply_patch_for_an_edited_deployment() -> None:
    """The three-way patch `kubectl apply` computes after editing the file: image changed, env var and
    port removed, label added, the live object holding server defaults the file never mentioned."""
    live = deployment(
        replicas=1,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    )
    live["spec"]["template"]["spec"]["containers"] = [
        container(
            "web",
            "nginx:1",
            env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            ports=[{"containerPort": 80, "protocol": "TCP"}],
            imagePullPolicy="IfNotPresent",
        ),
        container("log", "busybox", imagePullPolicy="Always"),
    ]
    patch = {
        "metadata": {"labels": {"team": "x"}},
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "web"}, {"name": "log"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "A"}],
                            "env": [{"$patch": "delete", "name": "B"}],
                            "image": "nginx:2",
                            "name": "web",
                            "ports": None,
                        }
                    ],
                }
            }
        },
    }
    result = strategic_merge_patch("apps/v1", "Deployment", live, patch)
    web, log = result["spec"]["template"]["spec"]["containers"]
    assert web == container(
        "web", "nginx:2", env=[{"name": "A", "value": "1"}], imagePullPolicy="IfNotPresent"
    )
    assert log == live["spec"]["template"]["spec"]["containers"][1]
    assert result["metadata"]["labels"] == {"team": "x"}
    assert result["spec"]["strategy"] == live["spec"]["strategy"]


def test_kubectl_rollout_restart_patch() -> None:
    patch = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}}
            }
        }
    }
    result = strategic_merge_patch("apps/v1", "Deployment", deployment(), patch)
    assert result["spec"]["template"]["metadata"] == {
        "labels": {"app": "web"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"},
    }


# ---------------------------------------------------------------------------------------------
# Inputs and outputs


def test_inputs_are_not_mutated_and_the_result_shares_nothing() -> None:
    original = pod(
        container("a", env=[{"name": "A", "value": "1"}]),
        container("b"),
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    original["metadata"]["finalizers"] = ["f"]
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["f"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}],
            "tolerations": [{"key": "t", "operator": "Exists"}],
        },
    }
    before_original, before_patch = copy.deepcopy(original), copy.deepcopy(patch)
    result = smp_pod(original, patch)
    assert original == before_original and patch == before_patch

    def walk(value: Any) -> list[int]:
        if isinstance(value, dict):
            return [id(value), *(i for v in value.values() for i in walk(v))]
        if isinstance(value, list):
            return [id(value), *(i for v in value for i in walk(v))]
        return []

    assert not set(walk(result)) & (set(walk(original)) | set(walk(patch)))


def test_directives_are_not_stored_in_new_values() -> None:
    result = smp_pod(
        pod(container("a")),
        {
            "spec": {
                "initContainers": [
                    {
                        "name": "init",
                        "image": "busybox",
                        "$setElementOrder/env": [{"name": "X"}],
                        "env": [{"name": "X"}],
                    },
                    {"name": "gone", "$patch": "delete"},
                ]
            }
        },
    )
    assert result["spec"]["initContainers"] == [{"name": "init", "image": "busybox", "env": [{"name": "X"}]}]


def test_custom_resources_are_unsupported() -> None:
    cr = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(UnsupportedStrategicPatch) as err:
        strategic_merge_patch("example.com/v1", "Widget", cr, {"spec": {"size": 1}})
    assert err.value.code == 415
    assert str(err.value) == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_a_typical_patch_on_a_ten_container_pod_is_fast() -> None:
    containers = [
        container(
            f"c{i}",
            env=[{"name": f"E{j}", "value": str(j)} for j in range(5)],
            ports=[{"containerPort": 80 + i}],
            volumeMounts=[{"name": "v", "mountPath": f"/m{i}"}],
        )
        for i in range(10)
    ]
    original = pod(*containers, volumes=[{"name": "v", "emptyDir": {}}])
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": f"c{i}"} for i in range(10)],
            "containers": [{"name": "c3", "image": "nginx:2"}],
        }
    }
    smp_pod(original, patch)
    best = float("inf")
    for _ in range(30):
        start = time.perf_counter()
        smp_pod(original, patch)
        best = min(best, time.perf_counter() - start)
    assert best < 0.001


# ---------------------------------------------------------------------------------------------
# Malformed patches: upstream's messages and status codes


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        (
            {"spec": {"containers": [{"image": "nginx"}]}},
            500,
            "map: map[image:nginx] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}},
            500,
            "unknown patch type: bogus in map: map[$patch:bogus name:a]",
        ),
        (
            {"metadata": {"labels": {"$patch": "bogus"}}},
            500,
            "unknown patch type: bogus in map: map[$patch:bogus]",
        ),
        (
            {"spec": {"containers": [{"name": "a", "$patch": "merge"}]}},
            500,
            "merging lists cannot yet be specified in the patch",
        ),
        (
            {"spec": {"$setElementOrder/containers": "a"}},
            500,
            "expected a []interface {}, but received a string",
        ),
        (
            {"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "zz"}]}},
            500,
            "The order in patch list:\n[map[name:zz]]\n"
            " doesn't match $setElementOrder list:\n[map[name:a]]\n",
        ),
        (
            {"metadata": {"$deleteFromPrimitiveListfinalizers": ["x"]}},
            400,
            "invalid patch format of primitive list",
        ),
        ({"spec": {"$setElementOrderX": []}}, 400, "invalid patch format of setElementOrder list"),
        ({"metadata": {"labels": {"$retainKeys": "app"}}}, 400, "invalid patch format of retainKeys"),
        ({"spec": {"containers": [["a"]]}}, 422, "lists of lists are not supported"),
    ],
)
def test_malformed_directives(patch: dict[str, Any], code: int, message: str) -> None:
    with pytest.raises(PatchError) as err:
        smp_pod(pod(container("a")), patch)
    assert (err.value.code, err.value.message) == (code, message)


def test_a_patch_that_is_not_an_object() -> None:
    with pytest.raises(PatchError) as err:
        smp_pod(pod(container("a")), [{"op": "add"}])  # type: ignore[arg-type]
    assert (err.value.code, err.value.message) == (
        400,
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
    )

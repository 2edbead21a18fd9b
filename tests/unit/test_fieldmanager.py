"""Server-side apply and managedFields tracking against upstream's semantics."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from services.api.fieldmanager import (
    ApplyConflict,
    InvalidApply,
    apply,
    conflict_status,
    update_managed_fields,
)

T0, T1, T2, T3 = (f"2024-01-01T00:00:0{i}Z" for i in range(4))
KEY_C = 'k:{"name":"c"}'
PORT_80 = 'k:{"containerPort":80,"protocol":"TCP"}'


def deployment(**spec: Any) -> dict[str, Any]:
    base = {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "x"}},
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
        },
    }
    base.update(spec)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default", "labels": {"app": "x"}}, "spec": base}


def stored(obj: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    """What the store would hold: the object with server metadata."""
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": uid, "resourceVersion": "7", "creationTimestamp": T0})
    return out


def entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields", [])}


def fields(obj: dict[str, Any], manager: str, operation: str = "Update") -> dict[str, Any]:
    return entries(obj)[(manager, operation)]["fieldsV1"]


def create(obj: dict[str, Any], manager: str = "creator") -> dict[str, Any]:
    return stored(update_managed_fields("apps/v1", obj["kind"], None, obj, manager, now=T0))


# ---------------------------------------------------------------------------------------------------------
# update_managed_fields


def test_create_records_every_field_in_fields_v1_format() -> None:
    out = update_managed_fields("apps/v1", "Deployment", None, deployment(), "kubectl-create", now=T0)
    [entry] = out["metadata"]["managedFields"]
    assert list(entry) == ["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1"]
    assert entry["manager"] == "kubectl-create" and entry["operation"] == "Update"
    assert entry["apiVersion"] == "apps/v1" and entry["time"] == T0 and entry["fieldsType"] == "FieldsV1"
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:containers": {KEY_C: {
                    ".": {}, "f:name": {}, "f:image": {},
                    "f:ports": {".": {}, PORT_80: {".": {}, "f:containerPort": {}}},
                }}},
            },
        },
    }


def test_inputs_are_not_mutated() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    old_copy, new_copy = copy.deepcopy(old), copy.deepcopy(new)
    update_managed_fields("apps/v1", "Deployment", old, new, "scaler", now=T1)
    config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
              "spec": {"replicas": 9}}
    config_copy = copy.deepcopy(config)
    apply("apps/v1", "Deployment", old, config, "applier", True, T1)
    assert old == old_copy and new == new_copy and config == config_copy


def test_update_moves_changed_fields_to_the_writer() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    new["metadata"]["labels"]["tier"] = "web"
    out = update_managed_fields("apps/v1", "Deployment", old, new, "scaler", now=T1)
    assert fields(out, "scaler") == {"f:metadata": {"f:labels": {"f:tier": {}}}, "f:spec": {"f:replicas": {}}}
    assert entries(out)[("scaler", "Update")]["time"] == T1
    creator = fields(out, "creator")
    assert "f:replicas" not in creator["f:spec"] and "f:selector" in creator["f:spec"]
    assert entries(out)[("creator", "Update")]["time"] == T0
    # Ordered like upstream: operation, then time, then manager.
    assert [e["manager"] for e in out["metadata"]["managedFields"]] == ["creator", "scaler"]


def test_update_merges_entries_of_the_same_manager_and_drops_empty_ones() -> None:
    old = create(deployment(), manager="m")
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 1
    once = stored(update_managed_fields("apps/v1", "Deployment", old, new, "other", now=T1))
    again = copy.deepcopy(once)
    again["spec"]["paused"] = True
    twice = update_managed_fields("apps/v1", "Deployment", once, again, "other", now=T2)
    assert fields(twice, "other") == {"f:spec": {"f:replicas": {}, "f:paused": {}}}
    assert entries(twice)[("other", "Update")]["time"] == T2
    # The map itself stays with its creator; a manager whose last field goes disappears.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    first = stored(update_managed_fields("v1", "ConfigMap", None, cm, "a", now=T0))
    second = copy.deepcopy(first)
    second["data"]["a"] = "2"
    out = update_managed_fields("v1", "ConfigMap", first, second, "b", now=T1)
    assert [(e["manager"], e["fieldsV1"]) for e in out["metadata"]["managedFields"]] == [
        ("a", {"f:data": {}}), ("b", {"f:data": {"f:a": {}}})]
    third = copy.deepcopy(first)
    del third["data"]
    third["binaryData"] = {"b": "eA=="}
    out = update_managed_fields("v1", "ConfigMap", first, third, "b", now=T1)
    assert [(e["manager"], e["fieldsV1"]) for e in out["metadata"]["managedFields"]] == [
        ("b", {"f:binaryData": {".": {}, "f:b": {}}})]


def test_entries_differ_by_api_version_and_subresource() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    new["status"] = {"replicas": 2}
    out = update_managed_fields("apps/v1", "Deployment", old, new, "creator", subresource="status", now=T1)
    status = [e for e in out["metadata"]["managedFields"] if e.get("subresource") == "status"]
    assert len(status) == 1 and status[0]["manager"] == "creator"
    assert status[0]["fieldsV1"] == {"f:status": {"f:replicas": {}}}
    assert list(status[0])[-1] == "subresource"


def test_status_is_not_owned_through_the_main_resource_and_spec_not_through_status() -> None:
    obj = deployment()
    obj["status"] = {"replicas": 3}
    out = update_managed_fields("apps/v1", "Deployment", None, obj, "creator", now=T0)
    assert "f:status" not in fields(out, "creator")
    old = stored(out)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 7
    new["status"] = {"replicas": 7}
    status = update_managed_fields("apps/v1", "Deployment", old, new, "kcm", subresource="status", now=T1)
    assert fields(status, "kcm") == {"f:status": {"f:replicas": {}}}


def test_noop_update_keeps_managed_fields_and_times() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "8"
    out = update_managed_fields("apps/v1", "Deployment", old, new, "someone", now=T3)
    assert out["metadata"]["managedFields"] == old["metadata"]["managedFields"]


def test_request_without_managed_fields_keeps_the_live_ones() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    del new["metadata"]["managedFields"]
    new["spec"]["replicas"] = 4
    out = update_managed_fields("apps/v1", "Deployment", old, new, "editor", now=T1)
    assert set(entries(out)) == {("creator", "Update"), ("editor", "Update")}


def test_empty_managed_fields_in_the_request_reset_tracking() -> None:
    old = create(deployment())
    for reset in ([], [{}]):
        new = copy.deepcopy(old)
        new["metadata"]["managedFields"] = reset
        out = update_managed_fields("apps/v1", "Deployment", old, new, "editor", now=T1)
        assert "managedFields" not in out["metadata"]


def test_existing_object_without_managed_fields_is_not_tracked() -> None:
    old = stored(deployment())
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 4
    out = update_managed_fields("apps/v1", "Deployment", old, new, "x", now=T1)
    assert "managedFields" not in out["metadata"]


def test_managed_fields_written_by_the_client_are_kept() -> None:
    """kubectl's client-side-apply upgrade rewrites managedFields with a JSON patch."""
    old = create(deployment(), manager="kubectl-client-side-apply")
    new = copy.deepcopy(old)
    [entry] = new["metadata"]["managedFields"]
    new["metadata"]["managedFields"] = [{**entry, "manager": "kubectl", "operation": "Apply"}]
    out = update_managed_fields("apps/v1", "Deployment", old, new, "kubectl", operation="Update", now=T1)
    assert set(entries(out)) == {("kubectl", "Apply")}
    # Malformed entries fall back to the live ones.
    new["metadata"]["managedFields"] = [{"manager": "x", "operation": "Bogus"}]
    out = update_managed_fields("apps/v1", "Deployment", old, new, "kubectl", now=T1)
    assert set(entries(out)) == {("kubectl-client-side-apply", "Update")}


def test_removed_fields_leave_every_manager() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    del new["metadata"]["labels"]
    new["spec"]["template"]["spec"]["containers"][0].pop("ports")
    out = update_managed_fields("apps/v1", "Deployment", old, new, "editor", now=T1)
    creator = fields(out, "creator")
    assert "f:metadata" not in creator
    assert "f:ports" not in creator["f:spec"]["f:template"]["f:spec"]["f:containers"][KEY_C]
    assert ("editor", "Update") not in entries(out)


def test_update_managers_are_capped_at_ten() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    obj = stored(update_managed_fields("v1", "ConfigMap", None, cm, "m0", now=T0))
    for i in range(12):
        new = copy.deepcopy(obj)
        new["data"][f"k{i}"] = "v"
        now = f"2024-01-01T00:01:{i:02d}Z"
        obj = stored(update_managed_fields("v1", "ConfigMap", obj, new, f"m{i:02d}", now=now))
    managers = [e["manager"] for e in obj["metadata"]["managedFields"]]
    assert len(managers) == 10 and "ancient-changes" in managers
    ancient = entries(obj)[("ancient-changes", "Update")]["fieldsV1"]
    assert set(ancient["f:data"]) >= {"f:k0", "f:k1"}


def test_custom_resources_get_a_deduced_schema() -> None:
    cr = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"a": "b"}},
          "spec": {"size": 3, "tags": ["x"], "nested": {"k": "v"}}}
    out = update_managed_fields("example.com/v1", "Widget", None, cr, "m", now=T0)
    assert fields(out, "m") == {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
        "f:spec": {".": {}, "f:size": {}, "f:tags": {}, "f:nested": {".": {}, "f:k": {}}},
    }


def test_custom_resources_use_a_given_structural_schema() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                  "items": {"type": "object",
                            "properties": {"id": {"type": "string"}, "v": {"type": "integer"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
    }}}}
    cr = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
          "spec": {"items": [{"id": "a", "v": 1}], "tags": ["t"]}}
    out = update_managed_fields("example.com/v1", "Gadget", None, cr, "m", now=T0, schema=schema)
    assert fields(out, "m") == {"f:spec": {
        "f:items": {".": {}, 'k:{"id":"a"}': {".": {}, "f:id": {}, "f:v": {}}},
        "f:tags": {".": {}, 'v:"t"': {}}}}


def test_untypeable_objects_keep_their_managed_fields() -> None:
    old = create(deployment())
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"].append({"image": "no-name"})
    out = update_managed_fields("apps/v1", "Deployment", old, new, "editor", now=T1)
    assert out["metadata"]["managedFields"] == old["metadata"]["managedFields"]


# ---------------------------------------------------------------------------------------------------------
# apply


def config(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec}


def test_apply_creates_the_object_and_owns_what_it_set() -> None:
    out = apply("apps/v1", "Deployment", None, deployment(), "kubectl", False, T0)
    assert out["spec"]["replicas"] == 2
    [entry] = out["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"], entry["time"]) == (
        "kubectl", "Apply", "apps/v1", T0)
    owned = entry["fieldsV1"]
    assert owned["f:metadata"] == {"f:labels": {"f:app": {}}}
    assert owned["f:spec"]["f:selector"] == {}
    assert owned["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        KEY_C: {".": {}, "f:name": {}, "f:image": {},
                "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}}}


def test_apply_conflicts_with_another_managers_different_value() -> None:
    live = create(deployment(), manager="kubectl-client-side-apply")
    with pytest.raises(ApplyConflict) as caught:
        apply("apps/v1", "Deployment", live, config(replicas=3), "ssa", False, T1)
    err = caught.value
    assert err.conflicts == [("kubectl-client-side-apply", ".spec.replicas")]
    assert err.message == ('Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using '
                           'apps/v1: .spec.replicas')
    assert conflict_status(err) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": err.message,
        "reason": "Conflict", "code": 409,
        "details": {"causes": [{"reason": "FieldManagerConflict",
                                "message": 'conflict with "kubectl-client-side-apply" using apps/v1',
                                "field": ".spec.replicas"}]},
    }


def test_apply_conflict_message_with_several_fields_and_managers() -> None:
    live = create(deployment(), manager="a")
    new = copy.deepcopy(live)
    new["spec"]["paused"] = False
    live = stored(update_managed_fields("apps/v1", "Deployment", live, new, "b", subresource="scale", now=T1))
    cfg = config(replicas=3, paused=True,
                 template={"spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    with pytest.raises(ApplyConflict) as caught:
        apply("apps/v1", "Deployment", live, cfg, "ssa", False, T2)
    assert caught.value.message == (
        'Apply failed with 3 conflicts: conflicts with "a" using apps/v1:\n'
        "- .spec.replicas\n"
        '- .spec.template.spec.containers[name="c"].image\n'
        'conflicts with "b" with subresource "scale" using apps/v1:\n'
        "- .spec.paused")
    assert [c["field"] for c in caught.value.details["causes"]] == [
        ".spec.replicas", '.spec.template.spec.containers[name="c"].image', ".spec.paused"]


def test_same_value_is_shared_and_force_takes_over() -> None:
    live = create(deployment(), manager="a")
    shared = apply("apps/v1", "Deployment", live, config(replicas=2), "ssa", False, T1)
    assert "f:replicas" in fields(shared, "a")["f:spec"]
    assert fields(shared, "ssa", "Apply") == {"f:spec": {"f:replicas": {}}}
    forced = apply("apps/v1", "Deployment", stored(shared), config(replicas=4), "ssa", True, T2)
    assert forced["spec"]["replicas"] == 4
    assert "f:replicas" not in fields(forced, "a")["f:spec"]
    assert entries(forced)[("ssa", "Apply")]["time"] == T2


def test_fields_dropped_from_the_config_are_removed_unless_owned_elsewhere() -> None:
    base = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}}
    one = stored(apply("v1", "ConfigMap", None, base, "one", False, T0))
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"y": "2"}}
    both = stored(apply("v1", "ConfigMap", one, other, "two", False, T1))
    smaller = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}},
               "data": {"x": "1"}}
    out = apply("v1", "ConfigMap", both, smaller, "one", False, T2)
    assert out["metadata"]["labels"] == {"a": "1"}
    assert out["data"] == {"x": "1", "y": "2"}  # y is still applied by "two"
    assert fields(out, "one", "Apply") == {"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:x": {}}}
    # Dropping the last label removes the map altogether.
    out = apply("v1", "ConfigMap", stored(out), {**smaller, "metadata": {"name": "c"}}, "one", False, T3)
    assert "labels" not in out["metadata"] and out["metadata"]["name"] == "c"


def test_list_items_merge_by_key_and_dropped_items_are_pruned() -> None:
    two = deployment()
    two["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "busybox"})
    live = stored(apply("apps/v1", "Deployment", None, two, "me", False, T0))
    edited = copy.deepcopy(live)
    edited["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    live = stored(update_managed_fields("apps/v1", "Deployment", live, edited, "editor", now=T1))
    one = deployment()
    out = apply("apps/v1", "Deployment", live, one, "me", False, T2)
    containers = out["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["c"]
    assert containers[0]["imagePullPolicy"] == "Always"  # another manager's field inside a kept item


def test_list_merge_order_follows_upstream() -> None:
    def pod(*names: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": n, "image": "i"} for n in names]}}

    live = stored(update_managed_fields("v1", "Pod", None, pod("a", "b", "c"), "creator", now=T0))
    out = apply("v1", "Pod", live, pod("c", "d", "a"), "me", False, T1)
    assert [c["name"] for c in out["spec"]["containers"]] == ["b", "c", "d", "a"]


def test_set_and_atomic_lists() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["a/x"]},
           "spec": {"containers": [{"name": "c", "image": "i", "command": ["sh", "-c"]}]}}
    live = stored(update_managed_fields("v1", "Pod", None, pod, "creator", now=T0))
    cfg = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["b/y"]},
           "spec": {"containers": [{"name": "c", "command": ["true"]}]}}
    with pytest.raises(ApplyConflict) as caught:
        apply("v1", "Pod", live, cfg, "me", False, T1)
    assert caught.value.conflicts == [("creator", '.spec.containers[name="c"].command')]
    out = apply("v1", "Pod", live, cfg, "me", True, T1)
    assert out["metadata"]["finalizers"] == ["a/x", "b/y"]
    assert out["spec"]["containers"][0]["command"] == ["true"]
    assert fields(out, "me", "Apply")["f:metadata"] == {"f:finalizers": {'v:"b/y"': {}}}


def test_noop_apply_keeps_the_time() -> None:
    live = stored(apply("apps/v1", "Deployment", None, deployment(), "me", False, T0))
    out = apply("apps/v1", "Deployment", live, deployment(), "me", False, T3)
    assert entries(out)[("me", "Apply")]["time"] == T0
    assert out["spec"] == live["spec"]


def test_first_apply_to_an_untracked_object_records_before_first_apply() -> None:
    live = stored(deployment())
    out = apply("apps/v1", "Deployment", live, config(replicas=2), "me", False, T1)
    assert set(entries(out)) == {("before-first-apply", "Update"), ("me", "Apply")}
    with pytest.raises(ApplyConflict) as caught:
        apply("apps/v1", "Deployment", live, config(replicas=5), "me", False, T1)
    assert caught.value.conflicts == [("before-first-apply", ".spec.replicas")]


def test_server_side_apply_after_client_side_apply_takes_over_kubectl_fields() -> None:
    obj = deployment()
    last = json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": last}
    live = create(obj, manager="kubectl-client-side-apply")
    # Another controller changed the image: that one is not allowed to be taken silently.
    edited = copy.deepcopy(live)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    live = stored(update_managed_fields("apps/v1", "Deployment", live, edited, "other", now=T1))
    changed = deployment(replicas=5)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    out = apply("apps/v1", "Deployment", live, changed, "kubectl", False, T2)
    assert out["spec"]["replicas"] == 5
    assert "f:replicas" not in fields(out, "kubectl-client-side-apply")["f:spec"]
    annotation = out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert json.loads(annotation)["spec"]["replicas"] == 5
    with pytest.raises(ApplyConflict) as caught:
        apply("apps/v1", "Deployment", live, changed, "someone-else", False, T2)
    assert caught.value.conflicts == [("kubectl-client-side-apply", ".spec.replicas")]
    image = deployment()
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:3"
    with pytest.raises(ApplyConflict) as caught:
        apply("apps/v1", "Deployment", live, image, "kubectl", False, T2)
    assert caught.value.conflicts == [("other", '.spec.template.spec.containers[name="c"].image')]


@pytest.mark.parametrize(("body", "message"), [
    ([1], "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array "
          "into Go value of type map[string]interface {}"),
    ("x", "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string "
          "into Go value of type map[string]interface {}"),
    ({"metadata": {"name": "d"}}, "invalid object type: /, Kind="),
    ({"apiVersion": "apps/v1", "kind": "StatefulSet"}, "invalid object type: apps/v1, Kind=StatefulSet"),
    ({"apiVersion": "v1", "kind": "Deployment"}, "invalid object type: /v1, Kind=Deployment"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "managedFields": []}},
     "metadata.managedFields must be nil"),
])
def test_malformed_apply_bodies(body: Any, message: str) -> None:
    with pytest.raises(InvalidApply) as caught:
        apply("apps/v1", "Deployment", None, body, "me", False, T0)
    assert str(caught.value) == message and caught.value.code == 400
    assert isinstance(caught.value, ValueError)


def test_untypeable_apply_configurations() -> None:
    dup = deployment()
    dup["spec"]["template"]["spec"]["containers"].append({"name": "c", "image": "other"})
    with pytest.raises(InvalidApply) as caught:
        apply("apps/v1", "Deployment", None, dup, "me", False, T0)
    assert caught.value.code == 500
    assert str(caught.value) == ('failed to create typed patch object (default/d; apps/v1, Kind=Deployment): '
                                 '.spec.template.spec.containers: duplicate entries for key [name="c"]')
    nokey = deployment()
    nokey["spec"]["template"]["spec"]["containers"].append({"image": "other"})
    with pytest.raises(InvalidApply, match='omits all key fields \\["name"\\]'):
        apply("apps/v1", "Deployment", None, nokey, "me", False, T0)


def test_status_in_an_apply_to_the_main_resource_is_not_owned() -> None:
    cfg = deployment()
    cfg["status"] = {"replicas": 9}
    out = apply("apps/v1", "Deployment", None, cfg, "me", False, T0)
    assert "f:status" not in fields(out, "me", "Apply")


# ---------------------------------------------------------------------------------------------------------
# speed


def pod_with_containers(n: int, image: str = "nginx") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                           "labels": {"app": "x", "tier": "web"}},
            "spec": {"containers": [{
                "name": f"c{i}", "image": image, "args": ["--port", str(8000 + i)],
                "ports": [{"containerPort": 8000 + i, "name": f"http{i}"}],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": f"/data{i}"}]} for i in range(n)],
                "volumes": [{"name": "data", "emptyDir": {}}]}}


def best_of(fn: Any, rounds: int = 30) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def test_apply_to_a_pod_with_ten_containers_is_fast() -> None:
    live = stored(apply("v1", "Pod", None, pod_with_containers(10), "me", False, T0))
    changed = pod_with_containers(10, image="nginx:2")
    assert best_of(lambda: apply("v1", "Pod", live, changed, "me", False, T1)) < 0.005


def test_update_managed_fields_on_a_typical_update_is_fast() -> None:
    old = stored(update_managed_fields("v1", "Pod", None, pod_with_containers(3), "creator", now=T0))
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["tier"] = "db"
    new["spec"]["containers"][1]["image"] = "nginx:2"
    assert best_of(lambda: update_managed_fields("v1", "Pod", old, new, "editor", now=T1)) < 0.001

"""CRD schema validation through real kubectl: CEL rules (messages, reasons, fieldPath, transition rules),
defaults before validation, nullable, int-or-string, list-type uniqueness and size limits."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl

GROUP = "celval.pyk8s.io"
SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [
        {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
        {"rule": "self.mode != 'burst' || self.replicas >= 2"},
        {"rule": "!has(self.owner) || self.owner.startsWith('team-')", "reason": "FieldValueForbidden",
         "fieldPath": ".owner", "message": "owner must be a team"},
        {"rule": "self.maxReplicas <= 100", "messageExpression": "'maxReplicas ' + string(self.maxReplicas) + "
                                                                 "' is over the limit of 100'"},
        {"rule": "self.mode != 'safe' || self.replicas <= 3", "message": "safe mode allows at most 3 replicas"},
    ],
    "properties": {
        "replicas": {"type": "integer", "default": 1},
        "maxReplicas": {"type": "integer", "default": 10},
        "mode": {"type": "string", "enum": ["safe", "burst"], "default": "safe"},
        "owner": {"type": "string"},
        "storageClass": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "storageClass is immutable"}]},
        "version": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "optionalOldSelf": True,
             "message": "version may not go back"},
            {"rule": "oldSelf.hasValue() || self == 1", "optionalOldSelf": True,
             "message": "the first version is 1", "reason": "FieldValueRequired"}]},
        "note": {"type": "string", "maxLength": 5},
        "nothing": {"type": "string", "nullable": True},
        "dropped": {"type": "string"},
        "port": {"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
            {"rule": "type(self) == int ? self > 0 && self < 65536 : self.matches('^[a-z]+$')",
             "message": "port must be a number in range or a name"}]},
        "tags": {"type": "array", "maxItems": 3, "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "endpoints": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": {"type": "string"}, "url": {"type": "string"}}}},
        "labels": {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string"}},
    },
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"pools.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": "pools", "singular": "pool", "kind": "Pool"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.metadata.name.size() <= 20",
                                          "message": "name too long for a pool"}],
            "properties": {"spec": SPEC_SCHEMA},
        }}}],
    },
}


def _wait_established(kubectl: Kubectl, name: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = kubectl.json("get", "crd", name).get("status", {})
        if {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Established") == "True":
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never became Established")


@pytest.fixture(scope="module")
def crd(kubectl: Kubectl) -> str:
    kubectl.run("apply", "-f", "-", stdin=json.dumps(CRD))
    _wait_established(kubectl, CRD["metadata"]["name"])
    return CRD["metadata"]["name"]


def _pool(name: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Pool", "metadata": {"name": name}, "spec": spec})


def _create(kubectl: Kubectl, ns: str, name: str, **spec: Any) -> tuple[int, str]:
    r = kubectl.run("-n", ns, "create", "-f", "-", stdin=_pool(name, **spec), check=False)
    return r.returncode, r.stderr


def test_cel_messages(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    code, err = _create(kubectl, unique_ns, "p1", replicas=5, maxReplicas=4, mode="burst")
    assert code == 1
    assert 'The Pool "p1" is invalid: spec: Invalid value: "object": replicas must not exceed maxReplicas' in err
    code, err = _create(kubectl, unique_ns, "p2", replicas=1, mode="burst")
    assert "spec: Invalid value: \"object\": failed rule: self.mode != 'burst' || self.replicas >= 2" in err
    code, err = _create(kubectl, unique_ns, "p3", maxReplicas=200, replicas=1)
    assert 'spec: Invalid value: "object": maxReplicas 200 is over the limit of 100' in err
    code, err = _create(kubectl, unique_ns, "a-name-that-is-far-too-long", replicas=1)
    assert '<nil>: Invalid value: "object": name too long for a pool' in err
    assert kubectl.run("-n", unique_ns, "get", "pools", "-o", "name").stdout == ""


def test_reason_and_field_path(crd: str, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    code, err = _create(kubectl, unique_ns, "p1", owner="alice")
    assert code == 1 and 'The Pool "p1" is invalid: spec.owner: Forbidden: owner must be a team' in err
    r = httpx.post(f"{apiserver}/apis/{GROUP}/v1/namespaces/{unique_ns}/pools",
                   content=_pool("p1", owner="alice"), headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "spec.owner",
                                              "message": "Forbidden: owner must be a team"}]
    assert _create(kubectl, unique_ns, "p2", owner="team-a")[0] == 0


def test_defaults_apply_before_validation(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    code, err = _create(kubectl, unique_ns, "p1", replicas=5)
    assert code == 1 and 'spec: Invalid value: "object": safe mode allows at most 3 replicas' in err
    assert _create(kubectl, unique_ns, "p2", replicas=3)[0] == 0
    spec = kubectl.json("-n", unique_ns, "get", "pool", "p2")["spec"]
    assert spec == {"replicas": 3, "maxReplicas": 10, "mode": "safe"}


def test_transition_rules(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    ns = ("-n", unique_ns)
    kubectl.run(*ns, "create", "-f", "-", stdin=_pool("p1", storageClass="fast"))
    r = kubectl.run(*ns, "patch", "pool", "p1", "--type=merge", "-p", '{"spec":{"storageClass":"slow"}}',
                    check=False)
    assert r.returncode == 1
    assert 'The Pool "p1" is invalid: spec.storageClass: Invalid value: "string": storageClass is immutable' \
        in r.stderr
    kubectl.run(*ns, "patch", "pool", "p1", "--type=merge", "-p", '{"spec":{"replicas":2}}')
    # a field set for the first time has no old value: the transition rule does not run
    kubectl.run(*ns, "create", "-f", "-", stdin=_pool("p2"))
    kubectl.run(*ns, "patch", "pool", "p2", "--type=merge", "-p", '{"spec":{"storageClass":"any"}}')
    assert kubectl.json(*ns, "get", "pool", "p2")["spec"]["storageClass"] == "any"


def test_optional_old_self(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    ns = ("-n", unique_ns)
    code, err = _create(kubectl, unique_ns, "p1", version=3)
    assert code == 1 and "spec.version: Required value: the first version is 1" in err
    kubectl.run(*ns, "create", "-f", "-", stdin=_pool("p1", version=1))
    kubectl.run(*ns, "patch", "pool", "p1", "--type=merge", "-p", '{"spec":{"version":4}}')
    r = kubectl.run(*ns, "patch", "pool", "p1", "--type=json", "-p",
                    '[{"op":"replace","path":"/spec/version","value":2}]', check=False)
    assert r.returncode == 1
    assert 'spec.version: Invalid value: "integer": version may not go back' in r.stderr
    assert kubectl.json(*ns, "get", "pool", "p1")["spec"]["version"] == 4


def test_nullable_and_int_or_string(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    ns = ("-n", unique_ns)
    kubectl.run(*ns, "create", "-f", "-", stdin=_pool("p1", nothing=None, dropped=None, port=8080))
    spec = kubectl.json(*ns, "get", "pool", "p1")["spec"]
    assert spec["nothing"] is None and "dropped" not in spec and spec["port"] == 8080
    kubectl.run(*ns, "create", "-f", "-", stdin=_pool("p2", port="http"))
    code, err = _create(kubectl, unique_ns, "p3", port=True)
    assert code == 1
    assert 'spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"' \
        in err
    code, err = _create(kubectl, unique_ns, "p4", port=70000)
    assert 'spec.port: Invalid value: "": port must be a number in range or a name' in err


def test_sizes_and_list_types(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    code, err = _create(kubectl, unique_ns, "p1", tags=["a", "b", "a"])
    assert code == 1 and 'spec.tags[2]: Duplicate value: "a"' in err
    code, err = _create(kubectl, unique_ns, "p2", endpoints=[{"name": "x", "url": "u1"}, {"name": "x", "url": "u2"}])
    assert 'spec.endpoints[1]: Duplicate value: map[string]interface {}{"name":"x"}' in err
    code, err = _create(kubectl, unique_ns, "p3", tags=["a", "b", "c", "d"], note="toolong",
                        labels={"a": "1", "b": "2", "c": "3"})
    assert "spec.tags: Too many: 4: must have at most 3 items" in err
    assert "spec.note: Too long: may not be more than 5 bytes" in err
    assert "spec.labels: Too many: 3: must have at most 2 items" in err
    assert "some validation rules were not checked because the object was invalid" in err
    assert _create(kubectl, unique_ns, "p4", tags=["a", "b"], endpoints=[{"name": "x"}, {"name": "y"}])[0] == 0


def test_crd_with_rules_that_do_not_compile_is_rejected(crd: str, kubectl: Kubectl) -> None:
    bad = json.loads(json.dumps(CRD))
    bad["metadata"]["name"] = f"brokens.{GROUP}"
    bad["spec"]["names"] = {"plural": "brokens", "singular": "broken", "kind": "Broken"}
    spec = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [{"rule": "self.replicas >"}, {"rule": "self.nosuch == 1"},
                                        {"rule": "self.replicas", "reason": "Sometimes"}]
    r = kubectl.run("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert r.returncode == 1
    base = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations"
    assert f'The CustomResourceDefinition "brokens.{GROUP}" is invalid' in r.stderr
    assert f'{base}[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:"self.replicas >"' in r.stderr
    assert "compilation failed: ERROR: <input>:1:" in r.stderr
    assert "undefined field 'nosuch'" in r.stderr
    assert "cel expression must evaluate to a bool" in r.stderr
    assert f'{base}[2].reason: Unsupported value: "Sometimes"' in r.stderr
    assert kubectl.run("get", "crd", f"brokens.{GROUP}", check=False).returncode != 0
    # an update that breaks a rule of a served CRD is rejected the same way, and changes nothing
    broken = json.loads(json.dumps(CRD))
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [{"rule": "self.x("}]
    r = kubectl.run("apply", "-f", "-", stdin=json.dumps(broken), check=False)
    assert r.returncode == 1 and "compilation failed" in r.stderr
    stored = kubectl.json("get", "crd", CRD["metadata"]["name"])
    rules = stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert rules == CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]

"""Decoding Kubernetes protobuf request bodies, and the field table checked against upstream's OpenAPI."""

from __future__ import annotations

import base64
import importlib.resources
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver.endpoints.serialization import protobuf, protobuf_schema
from apiserver.endpoints.serialization.protobuf import (
    MESSAGES,
    ProtobufError,
    decode_protobuf,
    decode_request,
    go_duration,
)
from services.api import catalog, errors

# ---------------------------------------------------------------------------------------------
# A small encoder, enough to write the bodies client-go sends.


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def vi(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def ld(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return tag(number, 2) + varint(len(data)) + data


def entry(number: int, key: str, value: bytes | str) -> bytes:
    return ld(number, ld(1, key) + ld(2, value))


def envelope(api_version: str, kind: str, raw: bytes, content_type: str = "") -> bytes:
    body = ld(1, ld(1, api_version) + ld(2, kind)) + ld(2, raw)
    if content_type:
        body += ld(4, content_type)
    return protobuf.MAGIC + body


def meta(name: str, **extra: bytes) -> bytes:
    return ld(1, ld(1, name) + b"".join(extra.values()))


# ---------------------------------------------------------------------------------------------
# Objects


def test_namespace_as_upstream_json() -> None:
    raw = meta("team-a", labels=entry(11, "env", "prod"))
    assert decode_protobuf(envelope("v1", "Namespace", raw)) == {
        "kind": "Namespace", "apiVersion": "v1",
        "metadata": {"name": "team-a", "creationTimestamp": None, "labels": {"env": "prod"}},
        "spec": {}, "status": {},
    }


def test_zero_values_follow_omitempty_and_pointers() -> None:
    # kubectl's generated marshaller writes every non-pointer scalar, zero or not.
    raw = ld(1, ld(1, "d") + ld(2, "") + ld(3, "ns") + vi(7, 0) + ld(8, b""))
    spec = vi(1, 0) + vi(5, 0) + vi(7, 0) + ld(2, entry(1, "app", "d"))
    obj = decode_protobuf(envelope("apps/v1", "Deployment", raw + ld(2, spec)))
    assert obj["metadata"] == {"name": "d", "namespace": "ns", "creationTimestamp": None}
    assert obj["spec"]["replicas"] == 0  # a pointer: present means shown, even when zero
    assert "minReadySeconds" not in obj["spec"] and "paused" not in obj["spec"]
    assert obj["spec"]["selector"] == {"matchLabels": {"app": "d"}}
    assert obj["spec"]["strategy"] == {}
    assert obj["spec"]["template"] == {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}
    assert obj["status"] == {}


def test_pod_template_containers_ports_env_and_resources() -> None:
    container = (
        ld(1, "web") + ld(2, "busybox") + ld(3, "sleep") + ld(3, "3600")
        + ld(6, vi(3, 8080) + ld(4, "TCP"))
        + ld(7, ld(1, "A") + ld(2, "1")) + ld(7, ld(1, "B") + ld(3, ld(1, ld(2, "metadata.name"))))
        + ld(8, entry(1, "cpu", ld(1, "100m")) + entry(2, "memory", ld(1, "64Mi")))
        + ld(10, ld(1, ld(2, ld(1, "/healthz") + ld(2, vi(1, 1) + ld(3, "http")))) + vi(4, 5))
    )
    pod_spec = ld(1, ld(1, "cfg") + ld(2, ld(19, ld(1, ld(1, "settings")) + vi(3, 0o644)))) + ld(2, container)
    pod_spec += ld(14, vi(4, 1000) + vi(4, 2000)) + ld(22, ld(1, "k") + ld(2, "Exists"))
    obj = decode_protobuf(envelope("v1", "Pod", meta("p") + ld(2, pod_spec)))
    spec = obj["spec"]
    assert spec["volumes"] == [{"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}]
    (c,) = spec["containers"]
    assert c["name"] == "web" and c["image"] == "busybox" and c["command"] == ["sleep", "3600"]
    assert c["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert c["env"] == [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    assert c["resources"] == {"limits": {"cpu": "100m"}, "requests": {"memory": "64Mi"}}
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5}
    assert spec["securityContext"] == {"supplementalGroups": [1000, 2000]}
    assert spec["tolerations"] == [{"key": "k", "operator": "Exists"}]


def test_packed_repeated_integers() -> None:
    packed = ld(4, varint(5) + varint(7))
    obj = decode_protobuf(envelope("v1", "Pod", ld(2, ld(14, packed))))
    assert obj["spec"]["securityContext"]["supplementalGroups"] == [5, 7]


def test_secret_and_configmap_bytes_are_base64() -> None:
    blob = bytes(range(256))
    secret = meta("s") + entry(2, "k", b"v\x00\xff") + ld(3, "Opaque")
    assert decode_protobuf(envelope("v1", "Secret", secret)) == {
        "kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s", "creationTimestamp": None},
        "data": {"k": base64.b64encode(b"v\x00\xff").decode()}, "type": "Opaque",
    }
    cm = meta("c") + entry(2, "a", "b") + entry(3, "bin", blob) + entry(3, "empty", b"")
    obj = decode_protobuf(envelope("v1", "ConfigMap", cm))
    assert obj["data"] == {"a": "b"}
    assert base64.b64decode(obj["binaryData"]["bin"]) == blob
    assert obj["binaryData"]["empty"] == ""


def test_negative_int32_is_sign_extended() -> None:
    obj = decode_protobuf(envelope("scheduling.k8s.io/v1", "PriorityClass", meta("low") + vi(2, -5)))
    assert obj["value"] == -5
    assert "globalDefault" not in obj


def test_times_microtimes_and_durations() -> None:
    lease = ld(1, "holder") + ld(3, vi(1, 1_700_000_000) + vi(2, 123_456_789)) + vi(5, 0)
    obj = decode_protobuf(envelope("coordination.k8s.io/v1", "Lease", meta("l") + ld(2, lease)))
    assert obj["spec"] == {"holderIdentity": "holder", "acquireTime": "2023-11-14T22:13:20.123456Z",
                           "leaseTransitions": 0}
    stamped = ld(1, ld(1, "x") + ld(8, vi(1, 0)) + ld(9, vi(1, 86400) + vi(2, 999)))
    got = decode_protobuf(envelope("v1", "ConfigMap", stamped))["metadata"]
    assert got["creationTimestamp"] == "1970-01-01T00:00:00Z"
    assert got["deletionTimestamp"] == "1970-01-02T00:00:00Z"  # Time keeps whole seconds
    first = ld(1, ld(1, "x") + ld(8, vi(1, -62135596800)))
    assert decode_protobuf(envelope("v1", "ConfigMap", first))["metadata"]["creationTimestamp"] == (
        "0001-01-01T00:00:00Z")
    assert [go_duration(n) for n in (0, 999, 1500, 2_000_000, 1_500_000_000, 90 * 10**9, 3600 * 10**9, -5000)] == [
        "0s", "999ns", "1.5µs", "2ms", "1.5s", "1m30s", "1h0m0s", "-5µs"]


def test_int_or_string_and_quantities() -> None:
    port = ld(1, "http") + ld(2, "TCP") + vi(3, 80) + ld(4, vi(1, 0) + vi(2, 8080))
    named = ld(1, "x") + vi(3, 81) + ld(4, vi(1, 1) + ld(3, "web"))
    spec = ld(1, port) + ld(1, named) + entry(2, "app", "s") + ld(4, "ClusterIP")
    obj = decode_protobuf(envelope("v1", "Service", meta("s") + ld(2, spec)))
    assert obj["spec"]["ports"] == [
        {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
        {"name": "x", "port": 81, "targetPort": "web"},
    ]
    assert obj["status"] == {"loadBalancer": {}}
    pdb = ld(1, vi(1, 1) + ld(3, "50%"))
    assert decode_protobuf(envelope("policy/v1", "PodDisruptionBudget", ld(2, pdb)))["spec"] == {
        "minAvailable": "50%"}
    quota = ld(2, entry(1, "pods", ld(1, "10")) + entry(1, "cpu", b""))
    assert decode_protobuf(envelope("v1", "ResourceQuota", quota))["spec"] == {"hard": {"pods": "10", "cpu": "0"}}


def test_raw_extension_and_request_only_kinds() -> None:
    rev = meta("r") + ld(2, ld(1, b'{"spec":{"x":1}}')) + vi(3, 2)
    obj = decode_protobuf(envelope("apps/v1", "ControllerRevision", rev))
    assert obj["data"] == {"spec": {"x": 1}} and obj["revision"] == 2
    eviction = meta("pod-1") + ld(2, vi(1, 0) + ld(2, ld(1, "uid-1")) + ld(5, "All"))
    assert decode_protobuf(envelope("policy/v1", "Eviction", eviction)) == {
        "kind": "Eviction", "apiVersion": "policy/v1",
        "metadata": {"name": "pod-1", "creationTimestamp": None},
        "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-1"}, "dryRun": ["All"]},
    }
    token = ld(2, ld(1, "api") + vi(4, 3600))
    assert decode_protobuf(envelope("authentication.k8s.io/v1", "TokenRequest", token))["spec"] == {
        "audiences": ["api"], "boundObjectRef": None, "expirationSeconds": 3600}
    for api_version in ("v1", "meta.k8s.io/v1", "apps/v1"):
        opts = decode_protobuf(envelope(api_version, "DeleteOptions", ld(4, "Foreground")))
        assert opts == {"kind": "DeleteOptions", "apiVersion": api_version, "propagationPolicy": "Foreground"}
    binding = meta("p") + ld(2, ld(1, "Node") + ld(3, "n1"))
    assert decode_protobuf(envelope("v1", "Binding", binding))["target"] == {"kind": "Node", "name": "n1"}


def test_rbac_and_authorization_extra_values() -> None:
    role = meta("r") + ld(2, ld(1, "get") + ld(1, "list") + ld(2, "") + ld(3, "pods"))
    assert decode_protobuf(envelope("rbac.authorization.k8s.io/v1", "Role", role))["rules"] == [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    empty_role = decode_protobuf(envelope("rbac.authorization.k8s.io/v1", "ClusterRole", meta("c")))
    assert empty_role["rules"] is None
    sar = ld(2, ld(3, "alice") + entry(5, "scopes", ld(1, "a") + ld(1, "b")))
    obj = decode_protobuf(envelope("authorization.k8s.io/v1", "SubjectAccessReview", sar))
    assert obj["spec"] == {"user": "alice", "extra": {"scopes": ["a", "b"]}}
    assert obj["status"] == {"allowed": False}


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    unknown = vi(99, 7) + tag(98, 1) + b"\x00" * 8 + ld(97, b"junk") + tag(96, 5) + b"\x00" * 4
    obj = decode_protobuf(envelope("v1", "ConfigMap", meta("c", x=unknown) + unknown) + unknown)
    assert obj == {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "creationTimestamp": None}}


def test_repeated_message_fields_merge() -> None:
    raw = ld(1, ld(1, "a")) + ld(1, ld(3, "ns"))
    assert decode_protobuf(envelope("v1", "ConfigMap", raw))["metadata"] == {
        "name": "a", "namespace": "ns", "creationTimestamp": None}


def test_json_inside_the_envelope() -> None:
    body = envelope("v1", "ConfigMap", b'{"metadata":{"name":"j"}}', "application/json")
    assert decode_protobuf(body) == {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "j"}}


@pytest.mark.parametrize(("body", "message"), [
    (b'{"kind":"ConfigMap"}', "prefix"),
    (protobuf.MAGIC + b"\x0a\x05ab", "past the end"),
    (protobuf.MAGIC + b"\x08\xff", "truncated varint"),
    (protobuf.MAGIC + b"\x08" + b"\xff" * 10 + b"\x01", "overflows"),
    (protobuf.MAGIC + b"\x00", "field number 0"),
    (protobuf.MAGIC + b"\x0b", "wire type 3"),
    (protobuf.MAGIC + ld(2, b""), "kind"),
    (envelope("v1", "Gadget", b""), 'no kind "Gadget" is registered for version "v1"'),
    (envelope("apps/v1", "Namespace", b""), 'no kind "Namespace"'),
    (envelope("v1", "ConfigMap", vi(1, 5)), "ConfigMap.metadata: wrong wire type 0"),
    (envelope("v1", "ConfigMap", ld(1, vi(1, 5))), "ObjectMeta.name: wrong wire type 0"),
    (envelope("v1", "ConfigMap", ld(4, b"x")), "ConfigMap.immutable: wrong wire type 2"),
    (envelope("v1", "Service", ld(2, ld(1, ld(4, vi(1, 7))))), "IntOrString has unknown type 7"),
    (envelope("apps/v1", "ControllerRevision", ld(2, ld(1, b"{nope"))), "not JSON"),
    (envelope("v1", "ConfigMap", ld(1, ld(8, vi(1, 10**12)))), "outside the years"),
    (envelope("v1", "ConfigMap", b"", "application/yaml"), "unsupported content type"),
    (protobuf.MAGIC + ld(1, ld(1, "v1") + ld(2, "ConfigMap")) + ld(3, "gzip"), "content encoding"),
])
def test_malformed_bodies_raise_protobuf_error(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message.replace("(", r"\(")):
        decode_protobuf(body)


def test_decode_request_answers_bad_request() -> None:
    with pytest.raises(errors.StatusError) as info:
        decode_request(protobuf.MAGIC + b"\x0a\x05ab")
    assert info.value.code == 400
    assert decode_request(envelope("v1", "Namespace", meta("n")))["metadata"]["name"] == "n"


_VALID = [
    envelope("v1", "Pod", meta("p", labels=entry(11, "a", "b")) + ld(2, ld(2, ld(1, "c") + ld(6, vi(3, 80))))),
    envelope("apps/v1", "Deployment", meta("d") + ld(2, vi(1, 2) + ld(4, ld(2, ld(1, vi(1, 1) + ld(3, "25%")))))),
    envelope("v1", "Secret", meta("s") + entry(2, "k", b"\xff")),
    envelope("coordination.k8s.io/v1", "Lease", ld(2, ld(3, vi(1, 5) + vi(2, 7)))),
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_protobuf_error(data: bytes) -> None:
    for body in (data, protobuf.MAGIC + data, envelope("v1", "Pod", data), envelope("apps/v1", "Deployment", data)):
        try:
            decode_protobuf(body)
        except ProtobufError:
            pass


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(_VALID), st.integers(0, 10_000), st.integers(0, 255), st.booleans())
def test_mutated_bodies_raise_only_protobuf_error(body: bytes, where: int, byte: int, cut: bool) -> None:
    pos = where % len(body)
    mutated = body[:pos] if cut else body[:pos] + bytes([byte]) + body[pos + 1:]
    try:
        result = decode_protobuf(mutated)
    except ProtobufError:
        return
    orjson.dumps(result)  # whatever decodes is plain JSON data


# ---------------------------------------------------------------------------------------------
# The table


def test_every_served_and_request_kind_has_a_message() -> None:
    for res in catalog.BUILTIN:
        if res.group == "apiextensions.k8s.io":
            continue  # CRDs reach the apiserver as JSON: kubectl and the apiextensions clientset send JSON
        assert (res.api_version, res.kind) in protobuf.ROOTS, res
    for extra in [("policy/v1", "Eviction"), ("v1", "Binding"), ("authentication.k8s.io/v1", "TokenRequest"),
                  ("meta.k8s.io/v1", "DeleteOptions"), ("autoscaling/v1", "Scale")]:
        assert extra in protobuf.ROOTS


def test_every_root_decodes_from_an_empty_message() -> None:
    """Non-pointer structs are filled in recursively; this also proves they form no cycle."""
    for (api_version, kind), name in protobuf.ROOTS.items():
        obj = decode_protobuf(envelope(api_version, kind, b""))
        assert obj["kind"] == kind, name
        orjson.dumps(obj)


def _definitions() -> dict[str, Any]:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / "v1.32.0-local"
    return json.loads((root / "_definitions.json").read_bytes())["$defs"]


_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_WELL_KNOWN_REFS = {
    "T": _META + "Time", "MT": _META + "MicroTime", "D": _META + "Duration", "FV": _META + "FieldsV1",
    "Q": "io.k8s.apimachinery.pkg.api.resource.Quantity", "IS": "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "RAW": "io.k8s.apimachinery.pkg.runtime.RawExtension",
}
_SCALAR_TYPES = {"s": ("string", None), "y": ("string", "byte"), "i": ("integer", "int32"),
                 "l": ("integer", "int64"), "b": ("boolean", None)}


def _definition_name(message: str) -> str:
    package, name = message.rsplit(".", 1)
    return f"{protobuf_schema.PACKAGES[package][2]}.{name}"


def _types(schema: dict[str, Any]) -> list[str]:
    declared = schema.get("type", [])
    return [declared] if isinstance(declared, str) else declared


def _check_value(field: protobuf.Field, schema: dict[str, Any], where: str) -> None:
    """One value of the field (a list item or a map value) against its OpenAPI schema."""
    if field.scalar:
        json_type, fmt = _SCALAR_TYPES[field.kind]
        assert json_type in _types(schema), (where, schema)
        if fmt:
            assert schema.get("format") == fmt, (where, schema)
    elif field.kind == "SL":
        assert "array" in _types(schema) and "string" in _types(schema["items"]), (where, schema)
    else:
        wanted = _WELL_KNOWN_REFS.get(field.kind) or _definition_name(field.message)
        assert schema.get("$ref") == f"#/$defs/{wanted}", (where, schema, wanted)


def _properties(definitions: dict[str, Any], name: str, inlined_into: dict[str, list[str]]) -> dict[str, Any]:
    """A message's OpenAPI properties; an inline-only message takes those of the types embedding it."""
    if name in MESSAGES and _definition_name(name) in definitions:
        return definitions[_definition_name(name)]["properties"]
    parents = inlined_into.get(name)
    assert parents, f"{name} has no OpenAPI definition and is never inlined"
    merged: dict[str, Any] = {}
    for parent in parents:
        merged.update(_properties(definitions, parent, inlined_into))
    return merged


def test_table_matches_upstream_openapi_definitions() -> None:
    definitions = _definitions()
    inlined_into: dict[str, list[str]] = {}
    for msg in MESSAGES.values():
        for field in msg.fields.values():
            if field.inline:
                inlined_into.setdefault(field.message, []).append(msg.name)
    checked = 0
    for msg in MESSAGES.values():
        props = _properties(definitions, msg.name, inlined_into)
        for field in msg.fields.values():
            if field.inline:
                continue
            where = f"{msg.name}.{field.name}"
            assert field.name in props, f"{where} is not a field of the OpenAPI definition"
            schema = props[field.name]
            if field.repeated:
                assert "array" in _types(schema), (where, schema)
                _check_value(field, schema["items"], where)
            elif field.map:
                assert "object" in _types(schema), (where, schema)
                _check_value(field, schema["additionalProperties"], where)
            else:
                _check_value(field, schema, where)
            checked += 1
    assert checked > 1300


def test_table_size() -> None:
    assert len(MESSAGES) >= 340
    assert sum(len(m.fields) for m in MESSAGES.values()) >= 1400


def test_csi_driver_and_storage_capacity() -> None:
    spec = vi(1, 0) + vi(2, 1) + ld(3, "Ephemeral") + ld(5, "File") + ld(6, ld(1, "vault") + vi(2, 3600))
    driver = decode_protobuf(envelope("storage.k8s.io/v1", "CSIDriver", meta("csi.example.com") + ld(2, spec)))
    assert driver == {
        "kind": "CSIDriver", "apiVersion": "storage.k8s.io/v1",
        "metadata": {"name": "csi.example.com", "creationTimestamp": None},
        "spec": {"attachRequired": False, "podInfoOnMount": True, "volumeLifecycleModes": ["Ephemeral"],
                 "fsGroupPolicy": "File", "tokenRequests": [{"audience": "vault", "expirationSeconds": 3600}]},
    }
    raw = meta("cap") + ld(2, entry(1, "zone", "a")) + ld(3, "standard") + ld(4, ld(1, "10Gi"))
    capacity = decode_protobuf(envelope("storage.k8s.io/v1", "CSIStorageCapacity", raw))
    assert capacity == {
        "kind": "CSIStorageCapacity", "apiVersion": "storage.k8s.io/v1",
        "metadata": {"name": "cap", "creationTimestamp": None},
        "nodeTopology": {"matchLabels": {"zone": "a"}}, "storageClassName": "standard", "capacity": "10Gi",
    }

"""services.api.validation: messages, field paths and reasons as upstream writes them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.api import validation as v

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def test_subdomain_message_is_upstreams() -> None:
    assert v.is_dns1123_subdomain("Foo_bar") == [SUBDOMAIN_MSG]
    assert v.is_dns1123_subdomain("a.b-c") == []
    assert v.is_dns1123_subdomain("a" * 254)[0] == "must be no more than 253 characters"


def test_label_rules() -> None:
    assert v.is_dns1123_label("ok-1") == []
    assert v.is_dns1123_label("Bad") == [LABEL_MSG]
    assert v.is_dns1123_label("a.b") == ["must not contain dots"]
    assert v.is_dns1035_label("1abc")[0].startswith("a DNS-1035 label must consist")
    assert v.is_dns1035_label("abc-1") == []


@pytest.mark.parametrize(
    ("key", "ok"),
    [("app", True), ("example.com/app", True), ("a/b/c", False), ("/app", False), ("Example.com/app", False),
     ("app-", False), ("x" * 64, False)],
)
def test_qualified_names(key: str, ok: bool) -> None:
    assert (v.is_qualified_name(key) == []) is ok


def test_label_values() -> None:
    assert v.is_label_value("") == []
    assert v.is_label_value("My_value.1") == []
    assert v.is_label_value("-bad") != []
    assert v.is_label_value("a" * 64)[0] == "must be no more than 63 characters"


def test_cause_bodies() -> None:
    assert v.invalid("metadata.name", "Foo", "x") == {
        "reason": "FieldValueInvalid", "message": 'Invalid value: "Foo": x', "field": "metadata.name"}
    assert v.required("spec.containers")["message"] == "Required value"
    assert v.required("metadata.name", "name or generateName is required")["message"] == (
        "Required value: name or generateName is required")
    assert v.not_supported("spec.restartPolicy", "Sometimes", ("Always", "OnFailure", "Never"))["message"] == (
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"')
    assert v.duplicate("spec.containers[1].name", "a")["message"] == 'Duplicate value: "a"'
    assert v.too_long("metadata.annotations", 262144)["message"] == "Too long: may not be more than 262144 bytes"
    assert v.invalid("spec.replicas", -1, "must be greater than or equal to 0")["message"] == (
        "Invalid value: -1: must be greater than or equal to 0")
    assert v.invalid("spec.selector", {"b": 1, "a": 2}, "x")["message"] == 'Invalid value: {"a":2,"b":1}: x'
    assert v.forbidden("spec", "no")["reason"] == "FieldValueForbidden"


def test_object_meta_requires_a_name() -> None:
    causes = v.validate_object_meta({"namespace": "default"}, True)
    assert causes == [v.required("metadata.name", "name or generateName is required")]
    assert v.validate_object_meta({"generateName": "web-", "namespace": "default"}, True)[0]["field"] == (
        "metadata.name")
    assert v.validate_object_meta({"name": "x", "generateName": "web-", "namespace": "default"}, True) == []


def test_object_meta_namespace_rules() -> None:
    assert v.validate_object_meta({"name": "x"}, True) == [v.required("metadata.namespace")]
    assert v.validate_object_meta({"name": "x", "namespace": "ns"}, False) == [
        v.forbidden("metadata.namespace", "not allowed on this type")]
    assert v.validate_object_meta({"name": "x", "namespace": "Bad"}, True)[0]["field"] == "metadata.namespace"


def test_object_meta_name_format_per_resource() -> None:
    causes = v.validate_object_meta({"name": "Bad_Name", "namespace": "d"}, True)
    assert causes == [v.invalid("metadata.name", "Bad_Name", SUBDOMAIN_MSG)]
    assert v.validate_object_meta({"name": "system:admin"}, False, v.name_is_path_segment) == []
    assert v.validate_object_meta({"name": "a/b"}, False, v.name_is_path_segment)[0]["message"] == (
        "Invalid value: \"a/b\": may not contain '/'")
    assert v.validate_object_meta({"name": "a.b"}, False, v.name_is_dns_label)[0]["message"].endswith(
        "must not contain dots")


def test_object_meta_labels_annotations_owners_finalizers() -> None:
    meta = {
        "name": "x",
        "labels": {"ok": "-bad-"},
        "annotations": {"a/b/c": "v"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": ""}],
        "finalizers": ["orphan", "foregroundDeletion", "bad finalizer"],
    }
    fields = [c["field"] for c in v.validate_object_meta(meta, False)]
    assert fields == ["metadata.labels", "metadata.annotations", "metadata.ownerReferences.uid",
                      "metadata.finalizers", "metadata.finalizers"]


def test_annotation_size_limit() -> None:
    meta = {"name": "x", "annotations": {"big": "x" * (256 * 1024)}}
    assert v.validate_object_meta(meta, False) == [v.too_long("metadata.annotations", 262144)]


def test_meta_update_immutable_fields() -> None:
    old = {"name": "a", "namespace": "d", "uid": "1", "creationTimestamp": "t"}
    new = dict(old, uid="2", name="b")
    causes = v.validate_object_meta_update(new, old)
    assert [c["field"] for c in causes] == ["metadata.name", "metadata.uid"]
    assert causes[0]["message"] == 'Invalid value: "b": field is immutable'


def test_label_selector_matching() -> None:
    sel = {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}
    assert v.selector_matches(sel, {"app": "web", "tier": "a"})
    assert not v.selector_matches(sel, {"app": "web", "tier": "b"})
    assert not v.selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, {})
    assert v.validate_label_selector({"matchExpressions": [{"key": "x", "operator": "In"}]}, "spec.selector")[0][
        "field"] == "spec.selector.matchExpressions[0].values"


@pytest.mark.parametrize(
    ("text", "value"),
    [("100m", Decimal("0.1")), ("1Gi", Decimal(2**30)), ("2k", Decimal(2000)), ("1e3", Decimal(1000)),
     ("0.5", Decimal("0.5")), (3, Decimal(3))],
)
def test_quantities(text: object, value: Decimal) -> None:
    assert v.parse_quantity(text) == value


def test_bad_quantities() -> None:
    with pytest.raises(ValueError):
        v.parse_quantity("abc")
    assert v.validate_quantity("-1", "x")[0]["message"] == 'Invalid value: "-1": must be greater than or equal to 0'
    assert "quantities must match" in v.validate_quantity("1Xi", "x")[0]["message"]


def test_port_names_and_env_names() -> None:
    assert v.is_valid_port_name("http") == []
    assert "must contain at least one letter (a-z)" in v.is_valid_port_name("123")
    assert "must not contain consecutive hyphens" in v.is_valid_port_name("a--b")
    assert v.is_env_var_name("MY_VAR") == []
    assert v.is_env_var_name("1VAR") != []
    assert v.is_valid_port_num(0) == ["must be between 1 and 65535, inclusive"]

"""Structural schemas and their CEL rules, checked directly (no server): messages, paths, reasons, oldSelf."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.registry import crcel, crschema

CRD_PATH = "spec.versions[0].schema.openAPIV3Schema"


def _schema(spec_rules: list[dict[str, Any]], **props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": spec_rules,
        "properties": props or {"min": {"type": "integer"}, "max": {"type": "integer"}, "name": {"type": "string"}},
    }}}


def _obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}}, "spec": spec}


def _messages(causes: list[dict[str, str]]) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in causes]


def test_rule_with_message_and_default_message() -> None:
    schema = _schema([{"rule": "self.min <= self.max", "message": "min must not exceed max"},
                      {"rule": "  self.name.startsWith('a')  "}])
    assert crschema.validate(schema, _obj(min=1, max=2, name="abc")) == []
    assert _messages(crschema.validate(schema, _obj(min=3, max=2, name="b"))) == [
        'spec: Invalid value: "object": min must not exceed max',
        "spec: Invalid value: \"object\": failed rule: self.name.startsWith('a')",
    ]


@pytest.mark.parametrize(("reason", "expected"), [
    ("FieldValueForbidden", "spec.max: Forbidden: too big"),
    ("FieldValueRequired", "spec.max: Required value: too big"),
    ("FieldValueDuplicate", 'spec.max: Duplicate value: "object"'),
    ("FieldValueInvalid", 'spec.max: Invalid value: "object": too big'),
])
def test_reasons_and_field_path(reason: str, expected: str) -> None:
    schema = _schema([{"rule": "self.max < 10", "message": "too big", "reason": reason, "fieldPath": ".max"}])
    causes = crschema.validate(schema, _obj(max=11))
    assert _messages(causes) == [expected]
    assert causes[0]["reason"] == reason


def test_message_expression_and_its_fallback() -> None:
    schema = _schema([
        {"rule": "self.max < 10", "messageExpression": "'max is ' + string(self.max) + ', limit 10'"},
        {"rule": "self.min < 10", "message": "static", "messageExpression": "self.nope"},
        {"rule": "self.min < 10", "messageExpression": "'   '"},
    ])
    assert _messages(crschema.validate(schema, _obj(min=11, max=11))) == [
        'spec: Invalid value: "object": max is 11, limit 10',
        'spec: Invalid value: "object": static',
        'spec: Invalid value: "object": failed rule: self.min < 10',
    ]


def test_transition_rules_need_an_old_value() -> None:
    schema = _schema([{"rule": "self.name == oldSelf.name", "message": "name is immutable"}])
    assert crschema.validate(schema, _obj(name="a")) == []
    assert crschema.validate(schema, _obj(name="a"), _obj(name="a")) == []
    assert _messages(crschema.validate(schema, _obj(name="b"), _obj(name="a"))) == [
        'spec: Invalid value: "object": name is immutable']


def test_transition_rule_skipped_when_the_field_is_new() -> None:
    schema = _schema([], max={"type": "integer", "x-kubernetes-validations": [
        {"rule": "self >= oldSelf", "message": "may only grow"}]})
    assert crschema.validate(schema, _obj(max=1), _obj()) == []
    assert _messages(crschema.validate(schema, _obj(max=1), _obj(max=2))) == [
        'spec.max: Invalid value: "integer": may only grow']


def test_optional_old_self() -> None:
    schema = _schema([{"rule": "oldSelf.hasValue() ? self.max >= oldSelf.value().max : self.max == 0",
                       "optionalOldSelf": True, "message": "start at 0, then grow"}])
    assert _messages(crschema.validate(schema, _obj(max=3))) == [
        'spec: Invalid value: "object": start at 0, then grow']
    assert crschema.validate(schema, _obj(max=0)) == []
    assert crschema.validate(schema, _obj(max=5), _obj(max=4)) == []
    assert len(crschema.validate(schema, _obj(max=3), _obj(max=4))) == 1


def test_root_rules_see_name_but_not_labels() -> None:
    schema = {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.metadata.name.startsWith('ok-')", "message": "bad name"},
        {"rule": "self.kind == 'X' && self.apiVersion == 'x.io/v1'"}]}
    assert _messages(crschema.validate(schema, _obj())) == ['<nil>: Invalid value: "object": bad name']
    problems = crcel.compile_errors({"type": "object", "x-kubernetes-validations": [
        {"rule": "self.metadata.labels.size() > 0"}]}, CRD_PATH)
    assert "undefined field 'labels'" in problems[0]["message"]


def test_library_functions() -> None:
    rules = [
        "self.items.all(x, x.size() < 5) && self.items.exists(x, x == 'a') && self.items.exists_one(x, x == 'b')",
        "self.items.map(x, x.upperAscii()) == ['A', 'B'] && self.items.filter(x, x != 'a') == ['b']",
        "self.host.matches('^[a-z.]+$') && self.host.endsWith('.io') && self.host.contains('ex')",
        "has(self.host) && !has(self.missing) && size(self.items) == 2",
        "int('7') == 7 && uint(7) == 7u && double(self.count) == 3.0 && string(self.count) == '3'",
        "duration('90s') < duration('2m') && timestamp('2024-01-01T00:00:00Z') < timestamp(self.when)",
        "quantity(self.mem).isGreaterThan(quantity('1Mi')) && quantity(self.mem).compareTo(quantity('1Gi')) < 0",
        "isURL(self.link) && url(self.link).getHost() == 'example.io' && url(self.link).getScheme() == 'https'",
        "isIP(self.addr) && ip(self.addr).family() == 4 && cidr('10.0.0.0/8').containsIP(ip(self.addr))",
        "self.host.split('.').size() == 2 && ['a', 'b'].join('-') == 'a-b' && self.host.indexOf('.') == 7",
        "[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6 && [3, 1].min() == 1 && self.host.lowerAscii() == self.host",
    ]
    props = {"items": {"type": "array", "items": {"type": "string"}}, "host": {"type": "string"},
             "missing": {"type": "string"}, "count": {"type": "integer"}, "when": {"type": "string"},
             "mem": {"type": "string"}, "link": {"type": "string"}, "addr": {"type": "string"}}
    schema = _schema([{"rule": r} for r in rules], **props)
    assert crcel.compile_errors(schema, CRD_PATH) == []
    good = _obj(items=["a", "b"], host="example.io", count=3, when="2025-06-01T00:00:00Z", mem="512Mi",
                link="https://example.io/x", addr="10.1.2.3")
    assert crschema.validate(schema, good) == []
    bad = dict(good["spec"], items=["a", "a"], host="EX", count=4, mem="2Gi", link="nope", addr="::1",
               when="2020-01-01T00:00:00Z", missing="x")
    assert len(crschema.validate(schema, _obj(**bad))) == len(rules)


def test_numbers_follow_the_schema_types() -> None:
    schema = _schema([{"rule": "self.ratio > 0.5 && self.count > 1"}],
                     ratio={"type": "number"}, count={"type": "integer"})
    assert crschema.validate(schema, _obj(ratio=1, count=2)) == []


def test_runtime_errors_are_reported_like_upstream() -> None:
    schema = _schema([{"rule": "self.name == 'x'"}, {"rule": "self.min / self.max > 0"}])
    causes = _messages(crschema.validate(schema, _obj(min=1, max=0)))
    assert causes == ["spec: Invalid value: \"object\": no such key: name evaluating rule: self.name == 'x'",
                      'spec: Invalid value: "object": division by zero evaluating rule: self.min / self.max > 0']


def test_rules_on_items_map_values_and_int_or_string() -> None:
    schema = _schema([], ports={"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self < 1024", "message": "privileged"}]}},
        labels={"type": "object", "additionalProperties": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.size() <= 3"}]}},
        port={"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
            {"rule": "type(self) == string ? self.matches('^[a-z]+$') : self > 0"}]})
    causes = _messages(crschema.validate(schema, _obj(ports=[80, 8080], labels={"k": "long"}, port=-1)))
    assert causes == ['spec.ports[1]: Invalid value: "integer": privileged',
                      'spec.labels[k]: Invalid value: "string": failed rule: self.size() <= 3',
                      'spec.port: Invalid value: "": failed rule: type(self) == string ? '
                      "self.matches('^[a-z]+$') : self > 0"]
    assert crschema.validate(schema, _obj(ports=[80], labels={"k": "v"}, port="http")) == []


def test_map_list_items_correlate_with_old_items_by_key() -> None:
    schema = _schema([], items={"type": "array", "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["name"], "items": {
                                    "type": "object", "properties": {"name": {"type": "string"},
                                                                     "size": {"type": "integer"}},
                                    "x-kubernetes-validations": [{"rule": "self.size >= oldSelf.size",
                                                                  "message": "shrunk"}]}})
    old = _obj(items=[{"name": "a", "size": 5}, {"name": "b", "size": 5}])
    new = _obj(items=[{"name": "b", "size": 4}, {"name": "c", "size": 1}, {"name": "a", "size": 6}])
    assert _messages(crschema.validate(schema, new, old)) == ['spec.items[0]: Invalid value: "object": shrunk']
    dup = _obj(items=[{"name": "a", "size": 1}, {"name": "a", "size": 2}])
    assert _messages(crschema.validate(schema, dup)) == [
        'spec.items[1]: Duplicate value: map[string]interface {}{"name":"a"}']


def test_structural_errors_block_rules() -> None:
    schema = _schema([{"rule": "self.max > 100"}])
    assert _messages(crschema.validate(schema, _obj(max="x"))) == [
        'spec.max: Invalid value: "string": spec.max in body must be of type integer: "string"',
        '<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; '
        "correct the existing errors to complete validation",
    ]


def test_null_for_non_nullable_field_is_dropped_then_defaulted() -> None:
    schema = _schema([], size={"type": "integer", "default": 3}, note={"type": "string"},
                     maybe={"type": "string", "nullable": True})
    obj = _obj(size=None, note=None, maybe=None)
    crschema.apply_defaults(schema, obj)
    assert obj["spec"] == {"size": 3, "maybe": None}
    assert crschema.validate(schema, obj) == []


@pytest.mark.parametrize(("rule", "detail"), [
    ({"rule": "self.min =="}, "Syntax error: mismatched input"),
    ({"rule": "self.nope > 1"}, "compilation failed: ERROR: <input>:1:5: undefined field 'nope'"),
    ({"rule": "bogus(self.min)"}, "undeclared reference to 'bogus'"),
    ({"rule": "self.min + 1"}, "cel expression must evaluate to a bool"),
    ({"rule": "self.name == 1"}, "found no matching overload for '_==_' applied to '(string, int)'"),
    ({"rule": "self.name.matches('[')"}, "invalid matches argument"),
])
def test_rules_that_do_not_compile(rule: dict[str, Any], detail: str) -> None:
    causes = crschema.validate_schema(_schema([rule]), CRD_PATH)
    assert len(causes) == 1, causes
    assert causes[0]["field"] == f"{CRD_PATH}.properties[spec].x-kubernetes-validations[0].rule"
    assert causes[0]["message"].startswith("Invalid value: apiextensions.ValidationRule{Rule:")
    assert detail in causes[0]["message"]


def test_rule_metadata_checks() -> None:
    rules = [{"rule": "self.min > 0", "reason": "Nope"},
             {"rule": "self.min > 0", "fieldPath": ".nope"},
             {"rule": "self.min > 0", "optionalOldSelf": True},
             {"rule": "self.min > 0", "messageExpression": "self.min"},
             {"rule": "self.min > 0\n&& self.max > 0"},
             {"rule": " "}]
    fields = {c["field"].rsplit("]", 1)[0].rsplit("[", 1)[1] + c["field"].rsplit("]", 1)[1]: c["message"]
              for c in crschema.validate_schema(_schema(rules), CRD_PATH)}
    assert fields["0.reason"].startswith('Unsupported value: "Nope": supported values: "FieldValueDuplicate"')
    assert fields["1.fieldPath"] == 'Invalid value: ".nope": fieldPath must be a valid path'
    assert fields["2.optionalOldSelf"] == "Invalid value: true: may not be set if oldSelf is not used in rule"
    assert fields["3.messageExpression"].endswith("must evaluate to string")
    assert fields["4.message"] == "Required value: message must be specified if rule contains line breaks"
    assert fields["5.rule"] == "Required value: rule is not specified"


def test_old_self_on_uncorrelatable_items_is_rejected() -> None:
    schema = _schema([], tags={"type": "array", "items": {"type": "string", "x-kubernetes-validations": [
        {"rule": "self == oldSelf"}]}})
    causes = crschema.validate_schema(schema, CRD_PATH)
    assert "oldSelf cannot be used on the uncorrelatable portion of the schema" in causes[0]["message"]


def test_rules_compile_once() -> None:
    crcel._parse.cache_clear()
    schema = _schema([{"rule": "self.min < 5"}])
    for i in range(5):
        crschema.validate(schema, _obj(min=i))
    info = crcel._parse.cache_info()
    assert info.misses == 1 and info.hits == 4


def test_runaway_work_is_cut_off_by_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crcel, "COST_BUDGET", 50 * crcel.EVALUATION_COST)
    schema = _schema([], items={"type": "array", "items": {"type": "string", "x-kubernetes-validations": [
        {"rule": "self.size() < 100"}]}})
    assert crschema.validate(schema, _obj(items=["x"] * 40)) == []
    causes = crschema.validate(schema, _obj(items=["x"] * 60))
    assert _messages(causes) == ['<nil>: Invalid value: "object": validation failed due to running out of cost '
                                 "budget, no further validation rules will be run"]


def test_nulls_follow_nullable_and_default_as_in_apiextensions() -> None:
    """A null where the schema is not nullable is dropped, or defaulted when there is a default, in
    properties, map values and list items alike (a null list item without a default stays, for validation);
    a nullable null is kept."""
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "plain": {"type": "string"},
        "kept": {"type": "string", "nullable": True},
        "size": {"type": "integer", "default": 3},
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "sized": {"type": "object", "additionalProperties": {"type": "integer", "default": 1}},
        "names": {"type": "array", "items": {"type": "string", "default": "x"}},
        "bare": {"type": "array", "items": {"type": "string"}},
    }}}}
    obj = {"spec": {"plain": None, "kept": None, "size": None, "tags": {"t": None, "u": "v"}, "sized": {"s": None},
                    "names": [None, "y"], "bare": [None]}}
    crschema.apply_defaults(schema, obj)
    assert obj == {"spec": {"kept": None, "size": 3, "tags": {"u": "v"}, "sized": {"s": 1}, "names": ["x", "y"],
                            "bare": [None]}}
    assert [c["field"] for c in crschema.validate(schema, obj)] == ["spec.bare[0]"]

"""Label and field selectors: grammar, upstream error text, matching semantics and speed."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.selectors import (
    DOES_NOT_EXIST,
    EQUALS,
    EXISTS,
    IN,
    NOT_EQUALS,
    NOT_IN,
    FieldSelector,
    LabelSelector,
    Requirement,
    escape_field_value,
)
from services.api.validation import is_label_value, is_qualified_name

QNAME_HELP = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


# --------------------------------------------------------------------------------------------
# Label selector parsing


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("x=a", "x=a"),
        ("x==a", "x==a"),
        ("x!=a", "x!=a"),
        ("x=", "x="),
        ("x= ", "x="),
        ("x=,z= ", "x=,z="),
        ("  x  =  a  ", "x=a"),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("x in (c,b,a,b)", "x in (a,b,c)"),
        ("x in (,)", "x in ()"),
        ("x in ( )", "x in ()"),
        ("x notin (a)", "x notin (a)"),
        ("!x", "!x"),
        ("! x", "!x"),
        ("x", "x"),
        ("x>1", "x>1"),
        ("x<3", "x<3"),
        ("x > 1 , y < 3", "x>1,y<3"),
        ("b=1,a=2,c", "a=2,b=1,c"),
        ("in in (in)", "in in (in)"),
        ("notin notin (notin)", "notin notin (notin)"),
        ("x=in", "x=in"),
        ("example.com/app=web", "example.com/app=web"),
        ("a.b-c_d=e.f-g_h", "a.b-c_d=e.f-g_h"),
        ("x\tin\t(a)", "x in (a)"),
        ("x\nin\n(a)", "x in (a)"),
        ("x=a,x!=b", "x=a,x!=b"),
        ("k=" + "v" * 63, "k=" + "v" * 63),
        ("p" * 253 + "/" + "n" * 63, "p" * 253 + "/" + "n" * 63),
    ],
)
def test_parse_canonical(text: str, canonical: str) -> None:
    sel = LabelSelector.parse(text)
    assert str(sel) == canonical
    assert LabelSelector.parse(str(sel)) == sel


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x=a y=b", "found 'y', expected: ',' or 'end of string'"),
        ("x==a==b", "found '==', expected: ',' or 'end of string'"),
        ("x=a b", "found 'b', expected: ',' or 'end of string'"),
        (",x", "found ',', expected: !, identifier, or 'end of string'"),
        ("x,", "found '', expected: identifier after ','"),
        ("x,,y", "found ',', expected: identifier after ','"),
        ("x b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("x!", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"),
        ("x in a", "unable to parse requirement: found 'a' expected: '('"),
        ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'"),
        ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("x=(", "unable to parse requirement: found '(', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!x=a", "found '=', expected: ',' or 'end of string'"),
        ("(x)", "found '(', expected: !, identifier, or 'end of string'"),
        ("x in ()a", "found 'a', expected: ',' or 'end of string'"),
        (
            "x>a",
            'unable to parse requirement: values[0]: Invalid value: "a": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "x<1.5",
            'unable to parse requirement: values[0]: Invalid value: "1.5": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "x<",
            'unable to parse requirement: values[0]: Invalid value: "": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        ("Ke@y=1", f'unable to parse requirement: <nil>: Invalid value: "Ke@y": name part {QNAME_HELP}'),
        ("/x", 'unable to parse requirement: <nil>: Invalid value: "/x": prefix part must be non-empty'),
        (
            "x/",
            'unable to parse requirement: <nil>: Invalid value: "x/": name part must be non-empty; '
            f"name part {QNAME_HELP}",
        ),
        (
            "a" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"a" * 64}": '
            "name part must be no more than 63 characters",
        ),
        ("x=a@b", f'unable to parse requirement: values[0][x]: Invalid value: "a@b": {VALUE_HELP}'),
        ("x=-1", f'unable to parse requirement: values[0][x]: Invalid value: "-1": {VALUE_HELP}'),
        (
            "x=" + "v" * 64,
            f'unable to parse requirement: values[0][x]: Invalid value: "{"v" * 64}": '
            f"must be no more than 63 characters",
        ),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        LabelSelector.parse(text)
    assert str(info.value) == message


def test_parse_error_bad_prefix() -> None:
    with pytest.raises(ValueError, match=r"prefix part a lowercase RFC 1123 subdomain must consist"):
        LabelSelector.parse("Example.com/x")
    with pytest.raises(ValueError, match=r"a qualified name must consist.*with an optional DNS subdomain"):
        LabelSelector.parse("a/b/c")


def test_validation_helpers() -> None:
    assert is_qualified_name("example.com/MyName") == []
    assert is_qualified_name("123-abc") == []
    assert is_qualified_name("-abc") != []
    assert is_qualified_name("a" * 63) == []
    assert is_qualified_name("e" * 254 + "/x") == ["prefix part must be no more than 253 characters"]
    assert is_label_value("") == []
    assert is_label_value("a_b.c-d") == []
    assert is_label_value("a_") != []
    assert is_label_value("a b") != []
    # A trailing newline must not slip past an end-of-string anchor.
    assert is_qualified_name("abc\n") != []
    assert is_label_value("abc\n") != []
    with pytest.raises(ValueError, match="name part must consist"):
        LabelSelector.from_dict({"matchLabels": {"app\n": "x"}})


# --------------------------------------------------------------------------------------------
# Label selector matching


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("", None, True),
        ("x=a", {"x": "a"}, True),
        ("x=a", {"x": "b"}, False),
        ("x=a", {}, False),
        ("x=a", None, False),
        ("x==a", {"x": "a"}, True),
        ("x!=a", {"x": "a"}, False),
        ("x!=a", {"x": "b"}, True),
        ("x!=a", {}, True),
        ("x=", {"x": ""}, True),
        ("x=", {}, False),
        ("x in (a,b)", {"x": "b"}, True),
        ("x in (a,b)", {"x": "c"}, False),
        ("x in (a,b)", {}, False),
        ("x in ()", {"x": ""}, True),
        ("x notin (a,b)", {"x": "a"}, False),
        ("x notin (a,b)", {"x": "c"}, True),
        ("x notin (a,b)", {}, True),
        ("x notin (a)", {"x": "a"}, False),
        ("x", {"x": ""}, True),
        ("x", {"y": "x"}, False),
        ("!x", {"x": ""}, False),
        ("!x", {"y": "x"}, True),
        ("x>1", {"x": "2"}, True),
        ("x>1", {"x": "1"}, False),
        ("x>1", {"x": "b"}, False),
        ("x>1", {}, False),
        ("x>1", {"x": "99999999999999999999"}, False),
        ("x<3", {"x": "-5"}, True),
        ("x<3", {"x": "3"}, False),
        ("x<3", {"x": " 1"}, False),
        ("x<3", {"x": "1_0"}, False),
        ("x<3", {"x": "1\n"}, False),
        ("x<3", {"x": "+1"}, True),
        ("x=a,y=b", {"x": "a", "y": "b", "z": "c"}, True),
        ("x=a,y=b", {"x": "a"}, False),
        ("x=a,y=b", {"x": "a", "y": "c"}, False),
        ("x=a,!y", {"x": "a"}, True),
        ("x=a,!y", {"x": "a", "y": ""}, False),
        ("x in (a),y notin (b),z", {"x": "a", "y": "c", "z": "1"}, True),
        ("x in (a),y notin (b),z", {"x": "a", "y": "b", "z": "1"}, False),
        ("x=a,x!=a", {"x": "a"}, False),
    ],
)
def test_matches(text: str, labels: dict[str, str] | None, expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected


def test_empty_and_nothing() -> None:
    assert LabelSelector.parse("").empty
    assert not LabelSelector.parse("x").empty
    nothing = LabelSelector.nothing()
    assert not nothing.empty
    assert nothing.matches_nothing
    assert not nothing.matches({})
    assert not nothing.matches({"x": "a"})
    assert str(nothing) == ""
    assert nothing != LabelSelector.parse("")


def test_requires_exact_match() -> None:
    sel = LabelSelector.parse("a=1,b in (2),c in (3,4),d!=5,e")
    assert sel.requires_exact_match("a") == "1"
    assert sel.requires_exact_match("b") == "2"
    assert sel.requires_exact_match("c") is None
    assert sel.requires_exact_match("d") is None
    assert sel.requires_exact_match("zzz") is None


def test_requirements_exposed_sorted() -> None:
    sel = LabelSelector.parse("z notin (b,a),a")
    assert [(r.key, r.operator, r.values) for r in sel.requirements] == [
        ("a", EXISTS, ()),
        ("z", NOT_IN, ("a", "b")),
    ]


# --------------------------------------------------------------------------------------------
# metav1.LabelSelector


def test_from_dict_nil_and_empty() -> None:
    assert LabelSelector.from_dict(None).matches_nothing
    assert not LabelSelector.from_dict(None).matches({"a": "b"})
    for empty in ({}, {"matchLabels": {}}, {"matchLabels": None, "matchExpressions": []}):
        sel = LabelSelector.from_dict(empty)
        assert sel.empty
        assert sel.matches({"anything": "goes"})


def test_from_dict_combines_labels_and_expressions() -> None:
    sel = LabelSelector.from_dict(
        {
            "matchLabels": {"app": "web", "tier": "front"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "owner", "operator": "Exists", "values": []},
            ],
        }
    )
    assert str(sel) == "app=web,!canary,env in (prod,staging),owner,tier=front,zone notin (b)"
    base = {"app": "web", "tier": "front", "env": "prod", "owner": "me"}
    assert sel.matches(base)
    assert sel.matches({**base, "zone": "a"})
    assert not sel.matches({**base, "zone": "b"})
    assert not sel.matches({**base, "canary": "true"})
    assert not sel.matches({**base, "env": "dev"})
    assert not sel.matches({k: v for k, v in base.items() if k != "owner"})


@pytest.mark.parametrize(
    ("sel", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Foo"}]},
            '"Foo" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]},
            '"in" is not a valid label selector operator',
        ),
        ({"matchExpressions": [{"key": "a"}]}, '"" is not a valid label selector operator'),
        (
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: []string{"x"}: values set must be empty for exists and does not exist',
        ),
        ({"matchLabels": {"a b": "c"}}, f'key: Invalid value: "a b": name part {QNAME_HELP}'),
        ({"matchLabels": {"a": "c d"}}, f'values[0][a]: Invalid value: "c d": {VALUE_HELP}'),
        (
            {"matchExpressions": [{"key": "a b", "operator": "Exists", "values": ["x"]}]},
            f'[key: Invalid value: "a b": name part {QNAME_HELP}, '
            'values: Invalid value: []string{"x"}: values set must be empty for exists and does not exist]',
        ),
        ({"matchLabels": ["a"]}, "matchLabels must be an object"),
        ({"matchExpressions": {"a": 1}}, "matchExpressions must be a list"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            "matchExpressions values must be a list of strings",
        ),
        ({"matchLabels": {"a": 1}}, "matchLabels[a] must be a string"),
    ],
)
def test_from_dict_errors(sel: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        LabelSelector.from_dict(sel)
    assert str(info.value) == message


def test_requirement_create_errors() -> None:
    with pytest.raises(ValueError, match=r'operator: Unsupported value: "bogus": supported values: "in"'):
        Requirement.create("a", "bogus", [])
    with pytest.raises(ValueError, match="exact-match compatibility requires one single value"):
        Requirement.create("a", EQUALS, ["x", "y"])
    assert Requirement.create("a", IN, ["x"]).matches({"a": "x"})
    assert not Requirement("a", "bogus", ["1"]).matches({"a": "0"})


def test_from_set() -> None:
    sel = LabelSelector.from_set({"b": "2", "a": "1"})
    assert str(sel) == "a=1,b=2"
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert not sel.matches({"a": "1"})
    assert LabelSelector.from_set(None).empty
    assert LabelSelector.from_set({}).matches(None)


# --------------------------------------------------------------------------------------------
# Property tests: canonical strings round-trip and matching agrees with a plain reference.

_name = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?", fullmatch=True)
_prefix = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}/{n}", _prefix, _name))
_value = st.one_of(st.just(""), _name, st.sampled_from(["in", "notin", "1", "42"]))
_int_value = st.integers(min_value=0, max_value=10**6).map(str)


@st.composite
def _requirement(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    op = draw(st.sampled_from([EQUALS, "==", NOT_EQUALS, IN, NOT_IN, EXISTS, DOES_NOT_EXIST, "gt", "lt"]))
    key = draw(_key)
    if op in (IN, NOT_IN):
        return key, op, draw(st.lists(_value, min_size=1, max_size=4))
    if op in (EXISTS, DOES_NOT_EXIST):
        return key, op, []
    if op in ("gt", "lt"):
        return key, op, [draw(_int_value)]
    return key, op, [draw(_value)]


def _render(key: str, op: str, values: list[str]) -> str:
    if op == EXISTS:
        return key
    if op == DOES_NOT_EXIST:
        return f"!{key}"
    if op in (IN, NOT_IN):
        return f"{key} {op} ({','.join(values)})"
    return key + {"gt": ">", "lt": "<"}.get(op, op) + values[0]


def _reference(key: str, op: str, values: list[str], labels: dict[str, str]) -> bool:
    present = key in labels
    actual = labels.get(key)
    if op in (EQUALS, "==", IN):
        return present and actual in values
    if op in (NOT_EQUALS, NOT_IN):
        return not present or actual not in values
    if op == EXISTS:
        return present
    if op == DOES_NOT_EXIST:
        return not present
    if not present or not actual.isdigit():
        return False
    return int(actual) > int(values[0]) if op == "gt" else int(actual) < int(values[0])


@given(st.lists(_requirement(), max_size=5), st.dictionaries(_key, st.one_of(_value, _int_value), max_size=6))
def test_property_round_trip_and_matching(
    reqs: list[tuple[str, str, list[str]]], labels: dict[str, str]
) -> None:
    text = ", ".join(_render(*r) for r in reqs)
    sel = LabelSelector.parse(text)
    again = LabelSelector.parse(str(sel))
    assert again == sel
    assert str(again) == str(sel)
    # Bias the labels toward the selector's keys so matches are not all trivially false.
    for key, _, values in reqs[:2]:
        labels.setdefault(key, values[0] if values else "")
    expected = all(_reference(k, op, vals, labels) for k, op, vals in reqs)
    assert sel.matches(labels) is expected
    assert again.matches(labels) is expected


@given(st.text(max_size=30))
def test_property_parse_never_crashes(text: str) -> None:
    try:
        sel = LabelSelector.parse(text)
    except ValueError:
        return
    assert LabelSelector.parse(str(sel)) == sel


# --------------------------------------------------------------------------------------------
# Field selectors


@pytest.mark.parametrize(
    ("text", "requirements", "canonical"),
    [
        ("", [], ""),
        ("metadata.name=foo", [("metadata.name", "=", "foo")], "metadata.name=foo"),
        ("metadata.name==foo", [("metadata.name", "=", "foo")], "metadata.name=foo"),
        ("status.phase!=Running", [("status.phase", "!=", "Running")], "status.phase!=Running"),
        ("b=2,a=1", [("a", "=", "1"), ("b", "=", "2")], "a=1,b=2"),
        ("a=", [("a", "=", "")], "a="),
        ("a=b,,c=d", [("a", "=", "b"), ("c", "=", "d")], "a=b,c=d"),
        (r"x=a\,b\=c\\d", [("x", "=", "a,b=c\\d")], r"x=a\,b\=c\\d"),
        ("=", [], ""),
        ("a!=", [("a", "!=", "")], "a!="),
    ],
)
def test_field_parse(text: str, requirements: list[tuple[str, str, str]], canonical: str) -> None:
    sel = FieldSelector.parse(text)
    assert list(sel.requirements) == requirements
    assert str(sel) == canonical
    assert FieldSelector.parse(str(sel)) == sel


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x", "invalid selector: 'x'; can't understand 'x'"),
        ("a=b,x", "invalid selector: 'a=b,x'; can't understand 'x'"),
        ("x=a=b", "invalid field selector: unescaped character in value: 61"),
        ("a!==b", "invalid field selector: unescaped character in value: 61"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        (r"x=\q", "invalid field selector: invalid escape sequence: \\q"),
        ("x=a\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_field_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        FieldSelector.parse(text)
    assert str(info.value) == message


def test_field_matching() -> None:
    sel = FieldSelector.parse("metadata.namespace=default,status.phase!=Running")
    assert sel.matches({"metadata.namespace": "default", "status.phase": "Pending"})
    assert sel.matches({"metadata.namespace": "default"})
    assert not sel.matches({"metadata.namespace": "default", "status.phase": "Running"})
    assert not sel.matches({"metadata.namespace": "kube-system"})
    assert FieldSelector.parse("spec.nodeName=").matches({})
    assert not FieldSelector.parse("spec.nodeName!=").matches({})
    assert FieldSelector.parse("").matches({})
    assert FieldSelector.parse("").empty
    assert not FieldSelector.parse("a=b").empty


def test_field_requires_exact_match() -> None:
    sel = FieldSelector.parse("metadata.name=web-0,spec.nodeName!=n1")
    assert sel.requires_exact_match("metadata.name") == "web-0"
    assert sel.requires_exact_match("spec.nodeName") is None
    assert FieldSelector.from_set({"a": "b"}).requires_exact_match("a") == "b"


_field_name = st.from_regex(r"[a-zA-Z][a-zA-Z.]{0,15}", fullmatch=True)


@given(st.lists(st.tuples(_field_name, st.sampled_from(["=", "!="]), st.text(max_size=12)), max_size=4))
def test_field_property_escape_round_trip(terms: list[tuple[str, str, str]]) -> None:
    text = ",".join(f"{f}{op}{escape_field_value(v)}" for f, op, v in terms)
    sel = FieldSelector.parse(text)
    assert sorted(sel.requirements) == sorted(terms)
    assert FieldSelector.parse(str(sel)) == sel
    fields = {f: v for f, _, v in terms}
    expected = all((fields.get(f, "") == v) == (op == "=") for f, op, v in terms)
    assert sel.matches(fields) is expected


# --------------------------------------------------------------------------------------------
# Speed: selectors run against every object of a list call.


def test_matching_ten_thousand_objects_is_fast() -> None:
    objects = [
        {"app": f"app{i % 10}", "tier": "front" if i % 2 else "back", "zone": f"z{i % 3}", "n": str(i)}
        for i in range(10_000)
    ]
    label_sel = LabelSelector.parse("app in (app1,app3),tier=front,zone notin (z0),!canary")
    field_sel = FieldSelector.parse("metadata.namespace=default,status.phase!=Failed")
    fields = {"metadata.namespace": "default", "status.phase": "Running", "metadata.name": "x"}
    start = time.perf_counter()
    hits = sum(1 for labels in objects if label_sel.matches(labels))
    field_hits = sum(1 for _ in objects if field_sel.matches(fields))
    elapsed = time.perf_counter() - start
    assert hits == sum(1 for i in range(10_000) if i % 10 in (1, 3) and i % 2 and i % 3 != 0)
    assert field_hits == 10_000
    assert elapsed < 0.5, f"20,000 selector matches took {elapsed:.3f}s"

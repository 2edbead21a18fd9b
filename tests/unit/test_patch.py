"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902): RFC examples, upstream messages, purity."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.patch import PatchError, create_merge_patch, json_equal, json_merge_patch, json_patch

# --------------------------------------------------------------------------------------------
# RFC 7386


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        # RFC 7386 appendix A, every example.
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # Beyond the RFC table.
        # evanphx/json-patch drops nulls inside objects in lists unless the list replaces an object.
        ({"y": [1]}, {"y": [{"a": None, "b": [{"c": None}]}]}, {"y": [{"b": [{}]}]}),
        ({}, {"n": [{"a": None}, None]}, {"n": [{}, None]}),
        ({"o": {"k": 1}}, {"o": [{"a": None}]}, {"o": [{"a": None}]}),
        (None, {"a": 1}, {"a": 1}),
        ("scalar", {"a": {"b": None}}, {"a": {}}),
        ({"a": 1}, {}, {"a": 1}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}, {"a": {"c": 2}}),
        ({"a": 1}, {"b": None}, {"a": 1}),
    ],
)
def test_merge_patch_rfc_examples(target: Any, patch: Any, result: Any) -> None:
    assert json_merge_patch(target, patch) == result


def test_merge_patch_preserves_key_order() -> None:
    merged = json_merge_patch({"a": 1, "b": 2, "c": 3}, {"b": 20, "d": 4})
    assert list(merged) == ["a", "b", "c", "d"]


def test_merge_patch_never_mutates_and_shares_nothing() -> None:
    target = {"metadata": {"labels": {"a": "1"}, "name": "x"}, "spec": {"list": [{"k": 1}]}}
    patch = {"metadata": {"labels": {"b": "2"}}, "status": {"conditions": [{"type": "Ready"}]}}
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = json_merge_patch(target, patch)
    assert target == target_before
    assert patch == patch_before
    result["spec"]["list"][0]["k"] = 99
    result["metadata"]["name"] = "y"
    result["status"]["conditions"][0]["type"] = "Gone"
    assert target == target_before
    assert patch == patch_before


_scalar = st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.floats(allow_nan=False))
_json_no_null = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=15,
)
_json = st.recursive(
    st.one_of(st.none(), _scalar),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=15,
)


@given(_json, _json_no_null)
def test_property_merge_patch_of_diff_reproduces_target(original: Any, modified: Any) -> None:
    patch = create_merge_patch(original, modified)
    assert json_equal(json_merge_patch(original, patch), modified)


def _null_inside_list(value: Any, in_list: bool = False) -> bool:
    if isinstance(value, dict):
        return any((v is None and in_list) or _null_inside_list(v, in_list) for v in value.values())
    if isinstance(value, list):
        return any(_null_inside_list(v, True) for v in value)
    return False


@given(_json, _json)
def test_property_merge_patch_is_pure_and_idempotent(target: Any, patch: Any) -> None:
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    once = json_merge_patch(target, patch)
    if not _null_inside_list(patch):  # upstream's null pruning in lists depends on the target
        assert json_equal(json_merge_patch(once, patch), once)
    assert json_equal(target, target_before)
    assert json_equal(patch, patch_before)


def test_create_merge_patch_deletes_and_recurses() -> None:
    original = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1]}
    modified = {"b": {"c": 2, "d": 4}, "e": [1, 2], "f": True}
    assert create_merge_patch(original, modified) == {"a": None, "b": {"d": 4}, "e": [1, 2], "f": True}
    assert create_merge_patch(original, original) == {}


# --------------------------------------------------------------------------------------------
# RFC 6902 (appendix A examples first), with evanphx/json-patch v4's leniencies where noted.

FINALIZERS = {"metadata": {"finalizers": ["a", "b"]}}


@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
            {"foo": "bar", "baz": "qux"},
        ),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
        ({"foo": None}, [{"op": "test", "path": "/foo", "value": None}], {"foo": None}),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        ({"foo": {"bar": 1}}, [{"op": "test", "path": "/foo", "value": {"bar": 1.0}}], {"foo": {"bar": 1}}),
        # Beyond the appendix.
        ({"a/b": 1, "m~n": 2}, [{"op": "remove", "path": "/a~1b"}, {"op": "remove", "path": "/m~0n"}], {}),
        ({"a": 1}, [{"op": "add", "path": "", "value": [1]}], [1]),
        ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
        ({"a": 1}, [{"op": "test", "path": "", "value": {"a": 1}}], {"a": 1}),
        ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
        ({"a": [1, 2]}, [{"op": "copy", "from": "/a/0", "path": "/a/-"}], {"a": [1, 2, 1]}),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a"}], {"a": {"b": 1}}),
        ({"a": [1, 2, 3]}, [{"op": "move", "from": "/a/0", "path": "/a/0"}], {"a": [1, 2, 3]}),
        ({"a": [1, 2, 3]}, [{"op": "replace", "path": "/a/0", "value": 0}], {"a": [0, 2, 3]}),
        ({"a": [1]}, [{"op": "add", "path": "/a/1", "value": 2}], {"a": [1, 2]}),
        ({"a": 1}, [{"op": "add", "path": "/a", "value": None}], {"a": None}),
        ({"a": 1}, None, {"a": 1}),
        ({"a": 1}, [], {"a": 1}),
        ([1, 2], [{"op": "add", "path": "/0", "value": 0}], [0, 1, 2]),
        ({"": 1}, [{"op": "replace", "path": "/", "value": 2}], {"": 2}),
        # v4 leniencies that clients of a real apiserver can rely on.
        ({"a": [1, 2, 3]}, [{"op": "remove", "path": "/a/-1"}], {"a": [1, 2]}),
        ({"a": [1, 2, 3]}, [{"op": "add", "path": "/a/-1", "value": 4}], {"a": [1, 2, 3, 4]}),
        ({"a": [1, 2, 3]}, [{"op": "add", "path": "/a/-4", "value": 0}], {"a": [0, 1, 2, 3]}),
        ({"a": [1, 2, 3]}, [{"op": "replace", "path": "/a/-1", "value": 0}], {"a": [1, 2, 0]}),
        ({"a": [1, 2, 3]}, [{"op": "test", "path": "/a/-3", "value": 1}], {"a": [1, 2, 3]}),
        ({"a": [1, 2]}, [{"op": "add", "path": "/a/01", "value": 9}], {"a": [1, 9, 2]}),
        ({"a": [1, 2]}, [{"op": "add", "path": "/a/+1", "value": 9}], {"a": [1, 9, 2]}),
        ({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}], {"a": 1, "b": 2}),
        ({"a": 1}, [{"op": "add", "path": "/b"}], {"a": 1, "b": None}),
        ({"a": 1}, [{"op": "replace", "path": "/a"}], {"a": None}),
        ({"a": 1}, [{"op": "copy", "from": "/zz", "path": "/b"}], {"a": 1, "b": None}),
        ({"a": 1}, [{"op": "test", "path": "/zz", "value": None}], {"a": 1}),
    ],
)
def test_json_patch_applies(doc: Any, ops: Any, result: Any) -> None:
    assert json_patch(doc, ops) == result


@pytest.mark.parametrize(
    ("doc", "ops", "message"),
    [
        (
            {"foo": "bar"},
            [{"op": "remove", "path": "/baz"}],
            "error in remove for path: '/baz': Unable to remove nonexistent key: baz: missing value",
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz/bat", "value": "qux"}],
            'add operation does not apply: doc is missing path: "/baz/bat": missing value',
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/foo/x", "value": 1}],
            'add operation does not apply: doc is missing path: "/foo/x": missing value',
        ),
        (
            {"foo": "bar"},
            [{"op": "remove", "path": "/a/b"}],
            'remove operation does not apply: doc is missing path: "/a/b": missing value',
        ),
        (
            {"foo": "bar"},
            [{"op": "remove", "path": ""}],
            'remove operation does not apply: doc is missing path: "": missing value',
        ),
        (
            {"foo": "bar"},
            [{"op": "replace", "path": "/x/y", "value": 1}],
            "replace operation does not apply: doc is missing path: /x/y: missing value",
        ),
        (
            {"baz": "qux"},
            [{"op": "test", "path": "/baz", "value": "bar"}],
            "testing value /baz failed: test failed",
        ),
        (
            {"foo": 1},
            [{"op": "test", "path": "/foo", "value": True}],
            "testing value /foo failed: test failed",
        ),
        ({"foo": 1}, [{"op": "test", "path": "/bar", "value": 1}], "testing value /bar failed: test failed"),
        ({"foo": 1}, [{"op": "test", "path": "/foo"}], "testing value /foo failed: test failed"),
        ({"foo": 1}, [{"op": "test", "path": "", "value": {}}], "testing value  failed: test failed"),
        (
            {"foo": 1},
            [{"op": "test", "path": "/a/b", "value": 1}],
            "test operation does not apply: is missing path: /a/b: missing value",
        ),
        (
            FINALIZERS,
            [{"op": "test", "path": "/metadata/finalizers/9", "value": "c"}],
            "error in test for path: '/metadata/finalizers/9': Unable to access invalid index: 9: "
            "invalid index referenced",
        ),
        (
            FINALIZERS,
            [{"op": "test", "path": "/metadata/finalizers/x", "value": "c"}],
            "error in test for path: '/metadata/finalizers/x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            FINALIZERS,
            [{"op": "add", "path": "/metadata/finalizers/3", "value": "x"}],
            "error in add for path: '/metadata/finalizers/3': Unable to access invalid index: 3: "
            "invalid index referenced",
        ),
        (
            FINALIZERS,
            [{"op": "add", "path": "/metadata/finalizers/-4", "value": "x"}],
            "error in add for path: '/metadata/finalizers/-4': Unable to access invalid index: -4: "
            "invalid index referenced",
        ),
        (
            FINALIZERS,
            [{"op": "add", "path": "/metadata/finalizers/x", "value": "x"}],
            "error in add for path: '/metadata/finalizers/x': value was not a proper array index: 'x': "
            'strconv.Atoi: parsing "x": invalid syntax',
        ),
        (
            FINALIZERS,
            [{"op": "remove", "path": "/metadata/finalizers/2"}],
            "error in remove for path: '/metadata/finalizers/2': Unable to access invalid index: 2: "
            "invalid index referenced",
        ),
        (
            FINALIZERS,
            [{"op": "remove", "path": "/metadata/finalizers/-"}],
            "error in remove for path: '/metadata/finalizers/-': strconv.Atoi: parsing \"-\": invalid syntax",
        ),
        (
            FINALIZERS,
            [{"op": "remove", "path": "/metadata/finalizers/1\n"}],
            "error in remove for path: '/metadata/finalizers/1\n': "
            'strconv.Atoi: parsing "1\\n": invalid syntax',
        ),
        (
            FINALIZERS,
            [{"op": "remove", "path": "/metadata/finalizers/99999999999999999999"}],
            "error in remove for path: '/metadata/finalizers/99999999999999999999': "
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
        ),
        (
            FINALIZERS,
            [{"op": "replace", "path": "/metadata/finalizers/-", "value": 1}],
            "replace operation does not apply: doc is missing key: /metadata/finalizers/-: missing value",
        ),
        (
            FINALIZERS,
            [{"op": "replace", "path": "/metadata/finalizers/7", "value": 1}],
            "replace operation does not apply: doc is missing key: /metadata/finalizers/7: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "/bar", "path": "/baz"}],
            "error in move for path: 'bar': Unable to remove nonexistent key: bar: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "/a/bar", "path": "/baz"}],
            "move operation does not apply: doc is missing from path: /a/bar: missing value",
        ),
        (
            FINALIZERS,
            [{"op": "move", "from": "/metadata/finalizers/9", "path": "/x"}],
            "error in move for path: '9': Unable to access invalid index: 9: invalid index referenced",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "/foo", "path": "/x/y"}],
            "move operation does not apply: doc is missing destination path: /x/y: missing value",
        ),
        (
            {"foo": {"a": 1}},
            [{"op": "move", "from": "/foo", "path": "/foo/a"}],
            "move operation does not apply: doc is missing destination path: /foo/a: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "/foo", "path": ""}],
            "move operation does not apply: doc is missing destination path: : missing value",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "", "path": "/x"}],
            "move operation does not apply: doc is missing from path: : missing value",
        ),
        (
            FINALIZERS,
            [{"op": "move", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/5"}],
            "error in move for path: '/metadata/finalizers/5': Unable to access invalid index: 5: "
            "invalid index referenced",
        ),
        (
            {"foo": 1},
            [{"op": "copy", "from": "/a/bar", "path": "/baz"}],
            "copy operation does not apply: doc is missing from path: /a/bar: missing value",
        ),
        (
            FINALIZERS,
            [{"op": "copy", "from": "/metadata/finalizers/9", "path": "/x"}],
            "error in copy for from: '/metadata/finalizers/9': Unable to access invalid index: 9: "
            "invalid index referenced",
        ),
        (
            {"foo": 1},
            [{"op": "copy", "from": "/foo", "path": "/x/y"}],
            "copy operation does not apply: doc is missing destination path: /x/y: missing value",
        ),
        (
            FINALIZERS,
            [{"op": "copy", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/9"}],
            "error while adding value during copy: "
            "Unable to access invalid index: 9: invalid index referenced",
        ),
        (
            {"foo": 1},
            [{"op": "copy", "path": "/x"}],
            "copy operation failed to decode from: operation, missing from field: missing value",
        ),
        ({"foo": 1}, [{"op": "copy", "from": "/foo"}], "copy operation failed to decode path: missing value"),
        ({"foo": 1}, [{"op": "add", "value": 1}], "add operation failed to decode path: missing value"),
        ({"foo": 1}, [{"op": "remove"}], "remove operation failed to decode path: missing value"),
        (
            {"foo": 1},
            [{"op": "replace", "value": 1}],
            "replace operation failed to decode path: operation missing path field: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": "/foo"}],
            "move operation failed to decode path: operation missing path field: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "add", "path": 5, "value": 1}],
            "add operation failed to decode path: missing value",
        ),
        (
            {"foo": 1},
            [{"op": "replace", "path": 5, "value": 1}],
            "replace operation failed to decode path: "
            "json: cannot unmarshal number into Go value of type string",
        ),
        (
            {"foo": 1},
            [{"op": "move", "from": ["/foo"], "path": "/x"}],
            "move operation failed to decode from: json: cannot unmarshal array into Go value of type string",
        ),
        (
            {"foo": 1},
            [{"op": "add", "path": "foo", "value": 1}],
            'add operation failed to decode path: invalid JSON pointer "foo": '
            "a pointer must be empty or start with '/'",
        ),
        (
            {"foo": 1},
            [{"op": "add", "path": "/a~2", "value": 1}],
            'add operation failed to decode path: invalid JSON pointer "/a~2": '
            "'~' must be followed by '0' or '1'",
        ),
        (
            {"foo": 1},
            [{"op": "remove", "path": "/a~"}],
            'remove operation failed to decode path: invalid JSON pointer "/a~": '
            "'~' must be followed by '0' or '1'",
        ),
        ({"foo": 1}, [{"op": "bogus", "path": "/x"}], "Unexpected kind: bogus"),
        ({"foo": 1}, [{"path": "/x"}], "Unexpected kind: unknown"),
        ({"foo": 1}, [None], "Unexpected kind: unknown"),
        ({"foo": 1}, [{"op": 7}], "Unexpected kind: unknown"),
    ],
)
def test_json_patch_errors_that_do_not_apply(doc: Any, ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as info:
        json_patch(doc, ops)
    assert str(info.value) == message
    assert info.value.code == 422
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"op": "add"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ("x", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        (5, "json: cannot unmarshal number into Go value of type jsonpatch.Patch"),
        (["x"], "json: cannot unmarshal string into Go value of type jsonpatch.Operation"),
        ([[1]], "json: cannot unmarshal array into Go value of type jsonpatch.Operation"),
        (
            [{"op": "test", "path": "", "value": 0}, True],
            "json: cannot unmarshal bool into Go value of type jsonpatch.Operation",
        ),
    ],
)
def test_json_patch_malformed_documents_are_bad_requests(ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as info:
        json_patch({"foo": 1}, ops)
    assert str(info.value) == message
    assert info.value.code == 400


def test_json_patch_is_atomic_and_pure() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "d"}
    before = copy.deepcopy(doc)
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/a/b/0"}, {"op": "test", "path": "/c", "value": "x"}])
    assert doc == before
    value = {"x": [1]}
    ops = [{"op": "add", "path": "/v", "value": value}, {"op": "copy", "from": "/a", "path": "/e"}]
    ops_before = copy.deepcopy(ops)
    result = json_patch(doc, ops)
    result["v"]["x"].append(2)
    result["e"]["b"].append(3)
    result["a"]["b"].append(4)
    assert doc == before
    assert ops == ops_before
    assert value == {"x": [1]}


def test_json_equal() -> None:
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert not json_equal(None, False)
    assert not json_equal([1], [1, 1])
    assert not json_equal({"a": 1}, {"b": 1})
    assert not json_equal("1", 1)
    assert json_equal(False, False)


_key = st.text(alphabet="ab/~", min_size=0, max_size=3)
_doc = st.dictionaries(_key, st.one_of(st.integers(), st.lists(st.integers(), max_size=3)), max_size=5)


def _pointer(*tokens: str) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


@given(_doc, _key, _json)
def test_property_add_then_remove_restores(doc: dict[str, Any], key: str, value: Any) -> None:
    path = _pointer(key)
    added = json_patch(doc, [{"op": "add", "path": path, "value": value}])
    assert json_equal(added[key], value)
    assert json_patch(added, [{"op": "test", "path": path, "value": value}]) == added
    if key not in doc:
        assert json_patch(added, [{"op": "remove", "path": path}]) == doc


@given(_doc, _key, _key)
def test_property_move_then_back(doc: dict[str, Any], src: str, dst: str) -> None:
    if src not in doc or dst in doc:
        return
    there = json_patch(doc, [{"op": "move", "from": _pointer(src), "path": _pointer(dst)}])
    assert json_patch(there, [{"op": "move", "from": _pointer(dst), "path": _pointer(src)}]) == doc


@given(st.lists(st.integers(), min_size=1, max_size=6), st.data())
def test_property_array_insert_matches_list_insert(items: list[int], data: st.DataObject) -> None:
    idx = data.draw(st.integers(min_value=0, max_value=len(items)))
    expected = items[:idx] + [99] + items[idx:]
    assert json_patch({"l": items}, [{"op": "add", "path": f"/l/{idx}", "value": 99}]) == {"l": expected}
    removed = json_patch({"l": expected}, [{"op": "remove", "path": f"/l/{idx}"}])
    assert removed == {"l": items}

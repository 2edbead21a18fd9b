"""Property tests for custom resources: random structural schemas (nested objects, arrays, maps,
int-or-string, preserve-unknown, defaults, enums, patterns, nullable, CEL rules) become CRDs, and
random or mutated objects (nulls, wrong types, huge numbers and deep nesting among them) go through
create, update, merge, strategic (which custom resources refuse) and JSON patch, and server-side apply.

The properties: never a 5xx; every error is a `Status` whose `code` is the HTTP code; a rejected
request changes nothing stored; an accepted object passes the schema it was accepted under. The
apiserver and etcd are private to this module.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from apiserver.registry import crschema
from tests.conftest import APIServerProcess, start_apiserver, start_etcd_cluster
from tests.integration.test_fuzz import hostile_values, json_values, mutated

GROUP = "fuzz.pyk8s.io"
NS = "default"
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.filter_too_much),
)
_COUNTER = itertools.count()
# bodies are serialized by json.dumps, which writes NaN and Infinity for such floats: the server must refuse them
JSON = {"Content-Type": "application/json"}

# -- schemas ----------------------------------------------------------------------------------------------

STRING_RULES = ["self.size() < 12", "self.startsWith('a') || self == ''", "self.matches('^[a-z0-9-]*$')",
                "!self.contains('zz')"]
INT_RULES = ["self < 50", "self % 2 == 0", "self >= 0 && self <= 1000", "int(string(self)) == self"]
OBJECT_RULES = ["size(self) <= 3", "self.all(k, k.size() < 8)"]
ARRAY_RULES = ["size(self) < 4", "self.all(x, x == x)", "self.exists(x, true) || size(self) == 0"]
BROKEN_RULES = ["self.size( <", "self.nosuch == 1", "self + 1", "bogus(self)"]
identifiers = st.text(alphabet="abcdefgxyz", min_size=1, max_size=5)


@st.composite
def rules_for(draw: st.DrawFn, templates: list[str], correlatable: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        rule: dict[str, Any] = {"rule": draw(st.sampled_from(templates))}
        if draw(st.integers(0, 3)) == 0:
            rule["message"] = draw(st.sampled_from(["bad value", "nope", " spaced "]))
        if draw(st.integers(0, 4)) == 0:
            rule["reason"] = draw(st.sampled_from(["FieldValueForbidden", "FieldValueRequired",
                                                   "FieldValueDuplicate", "FieldValueInvalid"]))
        if draw(st.integers(0, 4)) == 0:
            rule["messageExpression"] = draw(st.sampled_from(["'got ' + string(self)", "'x'", "string(1)"]))
        out.append(rule)
    if correlatable and draw(st.integers(0, 3)) == 0:
        optional = draw(st.booleans())
        out.append({"rule": "!oldSelf.hasValue() || self == oldSelf.value()" if optional else "self == oldSelf",
                    "optionalOldSelf": True} if optional else {"rule": "self == oldSelf", "message": "immutable"})
    if draw(st.integers(0, 15)) == 0:
        out.append({"rule": draw(st.sampled_from(BROKEN_RULES))})
    return out


@st.composite
def leaf_schema(draw: st.DrawFn, correlatable: bool) -> dict[str, Any]:
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "int-or-string", "preserve"]))
    node: dict[str, Any]
    if kind == "string":
        node = {"type": "string"}
        if draw(st.booleans()):
            node["maxLength"] = draw(st.integers(0, 10))
        if draw(st.integers(0, 3)) == 0:
            node["enum"] = draw(st.lists(identifiers, min_size=1, max_size=3, unique=True))
        if draw(st.integers(0, 3)) == 0:
            node["pattern"] = draw(st.sampled_from(["^[a-z]+$", "x", "^a.*", "[0-9]{2}"]))
        if draw(st.integers(0, 5)) == 0:
            node["format"] = draw(st.sampled_from(["date-time", "duration", "ipv4", "byte"]))
        node["x-kubernetes-validations"] = draw(rules_for(STRING_RULES, correlatable))
        if draw(st.integers(0, 2)) == 0:
            node["default"] = node["enum"][0] if node.get("enum") else draw(identifiers)
    elif kind in ("integer", "number"):
        node = {"type": kind}
        if draw(st.booleans()):
            node["minimum"] = draw(st.integers(-5, 5))
        if draw(st.booleans()):
            node["maximum"] = draw(st.integers(5, 100))
        if kind == "integer":
            node["x-kubernetes-validations"] = draw(rules_for(INT_RULES, correlatable))
        if draw(st.integers(0, 2)) == 0:
            node["default"] = draw(st.integers(-5, 100))
    elif kind == "boolean":
        node = {"type": "boolean"}
        if draw(st.booleans()):
            node["default"] = draw(st.booleans())
    elif kind == "int-or-string":
        node = {"x-kubernetes-int-or-string": True}
        if draw(st.booleans()):
            node["x-kubernetes-validations"] = [{"rule": "type(self) == int ? self > 0 : self.size() > 0"}]
    else:
        node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if draw(st.integers(0, 5)) == 0:
        node["nullable"] = True
    return {k: v for k, v in node.items() if v != []}


def schemas(depth: int = 0, correlatable: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    if depth >= 3:
        return leaf_schema(correlatable)
    return st.one_of(leaf_schema(correlatable), object_schema(depth, correlatable),
                     array_schema(depth, correlatable), map_schema(depth, correlatable))


@st.composite
def object_schema(draw: st.DrawFn, depth: int, correlatable: bool) -> dict[str, Any]:
    props = draw(st.dictionaries(identifiers, schemas(depth + 1, correlatable), min_size=1, max_size=4))
    node: dict[str, Any] = {"type": "object", "properties": props}
    if draw(st.booleans()):
        node["required"] = draw(st.lists(st.sampled_from(sorted(props)), max_size=2, unique=True))
    if draw(st.integers(0, 3)) == 0:
        node["maxProperties"] = draw(st.integers(1, 4))
    rules = draw(rules_for(OBJECT_RULES + [f"!has(self.{k}) || true" for k in props], correlatable))
    if rules:
        node["x-kubernetes-validations"] = rules
    if depth and draw(st.integers(0, 5)) == 0:
        node["nullable"] = True
    return node


@st.composite
def array_schema(draw: st.DrawFn, depth: int, correlatable: bool) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array"}
    list_type = draw(st.sampled_from(["atomic", "set", "map", None]))
    if list_type == "map":
        node["items"] = {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "value": draw(schemas(depth + 1, correlatable))}}
        node["x-kubernetes-list-map-keys"] = ["name"]
    elif list_type == "set":
        node["items"] = draw(st.sampled_from([{"type": "string"}, {"type": "integer"}]))
    else:
        node["items"] = draw(schemas(depth + 1, False))
    if list_type:
        node["x-kubernetes-list-type"] = list_type
    if draw(st.booleans()):
        node["maxItems"] = draw(st.integers(0, 4))
    if draw(st.integers(0, 5)) == 0:
        node["nullable"] = True
    rules = draw(rules_for(ARRAY_RULES, correlatable))
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


@st.composite
def map_schema(draw: st.DrawFn, depth: int, correlatable: bool) -> dict[str, Any]:
    node = {"type": "object", "additionalProperties": draw(schemas(depth + 1, correlatable))}
    if draw(st.integers(0, 3)) == 0:
        node["maxProperties"] = draw(st.integers(0, 3))
    return node


# -- objects that fit (or nearly fit) a schema ------------------------------------------------------------


@st.composite
def value_for(draw: st.DrawFn, node: dict[str, Any]) -> Any:
    """A value that fits `node`, or now and then a null (which its `nullable` and `default` decide about)."""
    if draw(st.integers(0, 9)) == 0:
        return None
    if node.get("enum"):
        return draw(st.sampled_from(node["enum"]))
    if node.get("x-kubernetes-int-or-string"):
        return draw(st.one_of(st.integers(-3, 70000), identifiers))
    t = node.get("type")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return draw(st.dictionaries(identifiers, json_values, max_size=3))
    if t == "string":
        text = draw(st.one_of(identifiers, st.sampled_from(["", "2024-01-01T00:00:00Z", "10.0.0.1", "1h", "aGk="])))
        return text[:node["maxLength"]] if draw(st.integers(0, 4)) and "maxLength" in node else text
    if t == "integer":
        if draw(st.integers(0, 4)):
            return draw(st.integers(node.get("minimum", -10), node.get("maximum", 120)))
        return draw(st.integers(-10, 120))
    if t == "number":
        return draw(st.one_of(st.integers(-10, 120), st.floats(-10, 120, allow_nan=False)))
    if t == "boolean":
        return draw(st.booleans())
    if t == "array":
        items = node["items"]
        limit = node.get("maxItems", 4) if draw(st.integers(0, 4)) else 4
        values = draw(st.lists(value_for(items), max_size=limit))
        if node.get("x-kubernetes-list-type") == "map":
            for i, v in enumerate(values):
                if isinstance(v, dict):
                    v["name"] = draw(st.sampled_from([f"n{i}", "n0"]))
        return values
    if t == "object" and "additionalProperties" in node:
        limit = min(3, node.get("maxProperties", 3)) if draw(st.integers(0, 4)) else 3
        return draw(st.dictionaries(identifiers, value_for(node["additionalProperties"]), max_size=limit))
    props = node.get("properties") or {}
    out = {}
    for key, sub in props.items():
        if key in (node.get("required") or []) or draw(st.booleans()):
            out[key] = draw(value_for(sub))
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = draw(object_schema(0, True))
    root = {"type": "object", "properties": {"spec": spec}}
    if draw(st.integers(0, 4)) == 0:
        root["x-kubernetes-validations"] = [{"rule": "self.metadata.name.size() < 30"}]
    first = {"verb": "create", "name": "o1", "spec": draw(value_for(spec)), "dry_run": False, "strict": False}
    ops = draw(st.lists(operations(spec), min_size=2, max_size=7))
    return root, [first, *ops]


@st.composite
def operations(draw: st.DrawFn, spec_schema: dict[str, Any]) -> dict[str, Any]:
    base = draw(value_for(spec_schema))
    body = draw(st.one_of(st.just(base), mutated(base), hostile_values))
    verb = draw(st.sampled_from(["create", "update", "update", "merge", "merge", "json", "apply", "status",
                                 "strategic"]))
    op: dict[str, Any] = {"verb": verb, "name": draw(st.sampled_from(["o1", "o1", "o2"])), "spec": body,
                          "dry_run": draw(st.integers(0, 6)) == 0,
                          "strict": draw(st.booleans())}
    if verb == "json":
        op["patch"] = draw(st.lists(st.fixed_dictionaries({
            "op": st.sampled_from(["add", "replace", "remove", "test"]),
            "path": st.sampled_from(["/spec", "/spec/" + next(iter(spec_schema["properties"])), "/spec/x",
                                     "/metadata/labels", "/spec/" + next(iter(spec_schema["properties"])) + "/0"]),
            "value": st.one_of(json_values, st.just(copy.deepcopy(body))),
        }), min_size=1, max_size=3))
    return op


# -- the apiserver under test -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_server(workdir: Path) -> Iterator[APIServerProcess]:
    members = start_etcd_cluster(1, workdir / "fuzz-crd-etcd")
    try:
        # Each example compares etcd's revision before and after, so nothing may write in the background:
        # the kubernetes Service's lease reconciler refreshes its lease every 10 s.
        server = start_apiserver([members[0].client_url], workdir / "fuzz-crd-apiserver",
                                 "--endpoint-reconciler-type", "none")
        try:
            yield server
        finally:
            server.stop()
    finally:
        for m in members:
            m.kill()


@pytest.fixture(scope="module")
def http(crd_server: APIServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=crd_server.url, timeout=httpx.Timeout(20)) as client:
        yield client


def _crd(plural: str, schema: dict[str, Any]) -> dict[str, Any]:
    kind = plural.capitalize()
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": schema}}]}}


def _status_problem(r: httpx.Response, what: str) -> str | None:
    if r.status_code >= 500:
        return f"{r.status_code} for {what}: {r.text[:600]}"
    if r.status_code >= 400:
        try:
            body = r.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("kind") != "Status" or body.get("code") != r.status_code:
            return f"{r.status_code} error body is not a Status for {what}: {r.text[:300]}"
    return None


def _stored(http: httpx.Client, collection: str) -> dict[str, Any]:
    r = http.get(collection)
    assert r.status_code == 200, r.text
    return {i["metadata"]["name"]: i for i in r.json()["items"]}


def _request(http: httpx.Client, collection: str, kind: str, op: dict[str, Any]) -> httpx.Response:
    obj = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": op["name"]}, "spec": op["spec"]}
    params: dict[str, str] = {"fieldManager": "fuzz"}
    if op["dry_run"]:
        params["dryRun"] = "All"
    if op["strict"]:
        params["fieldValidation"] = "Strict"
    item = f"{collection}/{op['name']}"
    verb = op["verb"]
    if verb == "create":
        return http.post(collection, content=json.dumps(obj), params=params, headers=JSON)
    if verb == "update":
        current = http.get(item)
        if current.status_code == 200:
            obj["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
        return http.put(item, content=json.dumps(obj), params=params, headers=JSON)
    if verb == "status":
        return http.put(f"{item}/status", content=json.dumps({**obj, "status": op["spec"]}), params=params,
                        headers=JSON)
    if verb in ("merge", "strategic"):
        return http.patch(item, content=json.dumps({"spec": op["spec"]}), params=params,
                          headers={"Content-Type": "application/merge-patch+json" if verb == "merge"
                                   else "application/strategic-merge-patch+json"})
    if verb == "json":
        return http.patch(item, content=json.dumps(op["patch"]), params=params,
                          headers={"Content-Type": "application/json-patch+json"})
    return http.patch(item, content=json.dumps(obj), params={**params, "force": "true"},
                      headers={"Content-Type": "application/apply-patch+yaml"})


@SETTINGS
@given(case=cases())
def test_random_schemas_and_objects(http: httpx.Client, case: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    schema, ops = case
    plural = f"things{next(_COUNTER)}s"
    crd = _crd(plural, schema)
    r = http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    problem = _status_problem(r, f"CRD create {json.dumps(schema)[:800]}")
    assert problem is None, problem
    if r.status_code != 201:
        assert r.status_code == 422, r.text
        assert http.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}"
                        ).status_code == 404
        return
    collection = f"/apis/{GROUP}/v1/namespaces/{NS}/{plural}"
    deadline = time.monotonic() + 10
    while http.get(collection).status_code != 200:
        assert time.monotonic() < deadline, f"{plural} never served"
        time.sleep(0.05)
    try:
        for op in ops:
            before = _stored(http, collection)
            r = _request(http, collection, crd["spec"]["names"]["kind"], op)
            what = f"{op['verb']} {json.dumps(op)[:600]} under {json.dumps(schema)[:800]}"
            problem = _status_problem(r, what)
            assert problem is None, problem
            after = _stored(http, collection)
            if r.status_code >= 400 or op["dry_run"]:
                assert after == before, f"{r.status_code} {r.text[:300]} changed stored objects for {what}"
            else:
                stored = after.get(op["name"])
                assert stored is not None, what
                causes = crschema.validate(schema, stored)
                assert causes == [], f"accepted object breaks its schema: {causes} for {what}"
    finally:
        http.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")

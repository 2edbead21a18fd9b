"""Property tests: whatever a client sends, the apiserver answers like upstream and stays consistent.

Random and mutated bodies, headers, selectors and query strings go to every route shape
with every method. The properties: never a 5xx; every error body is a `Status` whose
`code` is the HTTP code; and no rejected request, no read and no dry run changes what is
stored (etcd's revision does not move). Writes to every kind of the catalog, with every patch
type, carry bodies shaped by upstream's schema with nulls, wrong types, huge numbers and deep
nesting in them, and a sweep puts nulls in every list and field of a valid object of each kind.
The apiserver and etcd are private to this module, so destructive requests that succeed
(deleting the namespace, say) harm no other test; the fixture objects are put back whenever
something changed them.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from services.api import definitions
from services.api.catalog import BUILTIN, Resource
from tests.conftest import APIServerProcess, start_apiserver, start_etcd_cluster
from tests.integration.test_certificates import new_request

NS = "fuzz"
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.filter_too_much),
)

_CONTAINER = {"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}
_TEMPLATE = {"metadata": {"labels": {"app": "fuzz"}}, "spec": {"containers": [_CONTAINER]}}


@dataclass(frozen=True)
class Kind:
    """One resource the fuzz touches: where it lives and a valid object of it."""

    prefix: str
    plural: str
    kind: str
    namespaced: bool
    spec: dict[str, Any]
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return self.prefix.removeprefix("/api/").removeprefix("/apis/")

    def collection(self, namespace: str | None = NS) -> str:
        if self.namespaced and namespace:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def item(self, name: str, namespace: str | None = NS) -> str:
        return f"{self.collection(namespace)}/{quote(name, safe='')}"

    def valid(self, name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {"app": "fuzz"}}
        if self.namespaced:
            meta["namespace"] = NS
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, **copy.deepcopy(self.spec)}


KINDS = [
    Kind("/api/v1", "namespaces", "Namespace", False, {}, ("status", "finalize")),
    Kind("/api/v1", "nodes", "Node", False, {"spec": {"podCIDR": "10.244.0.0/24"}}, ("status",)),
    Kind("/api/v1", "configmaps", "ConfigMap", True, {"data": {"a": "b"}}),
    Kind("/api/v1", "secrets", "Secret", True, {"type": "Opaque", "data": {"k": base64.b64encode(b"v").decode()}}),
    Kind("/api/v1", "serviceaccounts", "ServiceAccount", True, {}),
    Kind("/api/v1", "pods", "Pod", True, {"spec": {"containers": [_CONTAINER]}}, ("status", "binding", "eviction")),
    Kind("/api/v1", "services", "Service", True,
         {"spec": {"selector": {"app": "fuzz"}, "ports": [{"port": 80, "targetPort": 8080}]}}, ("status",)),
    Kind("/api/v1", "replicationcontrollers", "ReplicationController", True,
         {"spec": {"replicas": 1, "selector": {"app": "fuzz"}, "template": _TEMPLATE}}, ("status", "scale")),
    Kind("/apis/apps/v1", "deployments", "Deployment", True,
         {"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "fuzz"}}, "template": _TEMPLATE}},
         ("status", "scale")),
    Kind("/apis/apps/v1", "statefulsets", "StatefulSet", True,
         {"spec": {"replicas": 1, "serviceName": "fuzz", "selector": {"matchLabels": {"app": "fuzz"}},
                   "template": _TEMPLATE}}, ("status", "scale")),
    Kind("/apis/apps/v1", "daemonsets", "DaemonSet", True,
         {"spec": {"selector": {"matchLabels": {"app": "fuzz"}}, "template": _TEMPLATE}}, ("status",)),
    Kind("/apis/batch/v1", "jobs", "Job", True,
         {"spec": {"template": {"spec": {"containers": [_CONTAINER], "restartPolicy": "Never"}}}}, ("status",)),
]
BY_PLURAL = {k.plural: k for k in KINDS}
FIXTURE_NAME = {k.plural: NS if k.plural == "namespaces" else f"fuzz-{k.plural}" for k in KINDS}


def fixture_objects() -> list[tuple[Kind, dict[str, Any]]]:
    """The objects every example may aim at, namespace first."""
    return [(k, k.valid(FIXTURE_NAME[k.plural])) for k in KINDS]


# -- the apiserver under test ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_etcd(workdir: Path) -> Iterator[str]:
    members = start_etcd_cluster(1, workdir / "fuzz-etcd")
    try:
        yield members[0].client_url
    finally:
        for m in members:
            m.kill()


@pytest.fixture(scope="module")
def fuzz_server(fuzz_etcd: str, workdir: Path) -> Iterator[APIServerProcess]:
    # Each example compares etcd's revision before and after, so as little as possible may write in the
    # background: the kubernetes Service's lease reconciler refreshes its lease every 10 s.
    server = start_apiserver([fuzz_etcd], workdir / "fuzz-apiserver", "--endpoint-reconciler-type", "none")
    try:
        yield server
    finally:
        server.stop()


#: what the apiserver itself writes in the background, as upstream's does: the flowcontrol Dangling
#: conditions, a CRD's status, a ValidatingAdmissionPolicy's type-checking status and an APIService's
#: Available condition (the availability controller) after an example changed one of those objects
_BACKGROUND = ("/registry/flowschemas/", "/registry/prioritylevelconfigurations/",
               "/registry/apiextensions.k8s.io/customresourcedefinitions/", "/registry/validatingadmissionpolicies/",
               "/registry/apiregistration.k8s.io/apiservices/")


@dataclass
class World:
    """The HTTP client and what we last knew of the stored state."""

    server: APIServerProcess
    http: httpx.Client
    etcd: str
    revision: int = -1
    snapshot: dict[str, str] = field(default_factory=dict)

    def etcd_revision(self) -> int:
        """etcd's current revision: a limited list is read from etcd and carries its header revision."""
        r = self.http.get("/api/v1/namespaces", params={"limit": "1"})
        assert r.status_code == 200, r.text
        return int(r.json()["metadata"]["resourceVersion"])

    def changed_keys(self, since: int) -> list[str]:
        """The etcd keys written after revision `since` (etcd's JSON gateway, min_mod_revision)."""
        everything = base64.b64encode(b"\0").decode()
        r = httpx.post(f"{self.etcd}/v3/kv/range", json={
            "key": everything, "range_end": everything, "keys_only": True, "min_mod_revision": str(since + 1)})
        return sorted(base64.b64decode(kv["key"]).decode() for kv in r.json().get("kvs", []))

    def take_snapshot(self) -> dict[str, str]:
        out = {}
        for k in KINDS:
            r = self.http.get(k.collection(None))
            assert r.status_code == 200, r.text
            for item in r.json()["items"]:
                m = item["metadata"]
                out[f"{k.plural}/{m.get('namespace', '')}/{m['name']}"] = m["resourceVersion"]
        return out

    def restore(self) -> None:
        """Put every fixture object back in a usable state (present, not being deleted)."""
        for k, obj in fixture_objects():
            name = obj["metadata"]["name"]
            path = k.item(name)
            current = self.http.get(path)
            if current.status_code == 200 and current.json()["metadata"].get("deletionTimestamp"):
                self._finish_deletion(k, path, current.json())
                current = self.http.get(path)
            if current.status_code == 404:
                created = self.http.post(k.collection(), json=obj)
                assert created.status_code == 201, (path, created.text, self.server.log_tail())
            else:
                assert current.status_code == 200, (path, current.text)

    def _finish_deletion(self, k: Kind, path: str, obj: dict[str, Any]) -> None:
        if k.plural == "namespaces":
            obj["spec"] = {"finalizers": []}
            self.http.put(f"{path}/finalize", json=obj)
        self.http.patch(path, json={"metadata": {"finalizers": None}},
                        headers={"Content-Type": "application/merge-patch+json"})
        self.http.delete(path, params={"gracePeriodSeconds": "0"})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.http.get(path).status_code != 404:
            time.sleep(0.05)

    def sync(self) -> None:
        """Refresh the snapshot (restoring fixtures first) when anything was written since the last one."""
        current = self.etcd_revision()
        if current == self.revision:
            return
        self.restore()
        self.snapshot = self.take_snapshot()
        self.revision = self.etcd_revision()


@pytest.fixture(scope="module")
def world(fuzz_server: APIServerProcess, fuzz_etcd: str) -> Iterator[World]:
    with httpx.Client(base_url=fuzz_server.url, timeout=httpx.Timeout(20)) as http:
        w = World(fuzz_server, http, fuzz_etcd)
        w.sync()
        yield w


# -- one request and the properties every answer must have ------------------------------------------------


@dataclass
class Req:
    method: str
    path: str
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def describe(self) -> str:
        body = self.body if self.body is None or len(self.body) < 400 else self.body[:400] + b"..."
        return f"{self.method} {self.path} params={self.params} headers={self.headers} body={body!r}"


READ_METHODS = ("GET", "HEAD", "OPTIONS")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def _upstream_500(req: Req, r: httpx.Response) -> bool:
    """Upstream answers 500 too when nodes/proxy has no node address to dial (GetPreferredNodeAddress's error)."""
    return "/nodes/" in req.path and "/proxy" in req.path and "no preferred addresses found" in r.text


def problem_with(world: World, req: Req) -> str | None:
    """What is wrong with the apiserver's answer to `req`, or None."""
    world.sync()
    before = world.revision
    try:
        r = world.http.request(req.method, req.path, params=req.params, headers=req.headers, content=req.body)
    except httpx.HTTPError as exc:
        return f"no answer ({exc!r}) to {req.describe()}\n{world.server.log_tail(30)}"
    code = r.status_code
    if code >= 500 and not _upstream_500(req, r):
        return f"{code} {r.text[:500]} for {req.describe()}\n{world.server.log_tail(30)}"
    if code >= 400 and req.method != "HEAD":
        try:
            status = r.json()
        except ValueError:
            status = None
        if not isinstance(status, dict) or status.get("kind") != "Status" or status.get("code") != code:
            return f"{code} error body is not a Status with code {code}: {r.text[:300]!r} for {req.describe()}"
    if "/watch/" in req.path and req.method in WRITE_METHODS and code < 400:
        return f"{code}: a write went through a /watch/ path (upstream: 405) {r.text[:200]} for {req.describe()}"
    dry_run = any(k == "dryRun" and v == "All" for k, v in req.params)
    if code >= 400 or req.method in READ_METHODS or (dry_run and code < 300):
        after = world.etcd_revision()
        written = world.changed_keys(before) if after != before else []
        target = req.path.split("?", 1)[0]
        if written and all(k.startswith(_BACKGROUND) and f"/{k.split('/')[-2]}" not in target for k in written) \
                and not _diff(world.snapshot, world.take_snapshot()):
            world.revision = -1
            return None
        if after != before:
            changed = _diff(world.snapshot, world.take_snapshot()) or {k: "written" for k in written}
            world.revision = -1
            why = "a rejected request" if code >= 400 else "a read or dry run"
            return f"{why} ({code} {r.text[:200]}) changed stored state: {changed or 'etcd revision moved'} " \
                   f"(revision {before} -> {after}) for {req.describe()}"
    return None


def _diff(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    out = {}
    for key in before.keys() | after.keys():
        if before.get(key) != after.get(key):
            out[key] = f"{before.get(key)} -> {after.get(key)}"
    return out


# -- strategies --------------------------------------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
weird_names = st.sampled_from(["", "x", "UPPER", "a..b", "-lead", "trail-", "a" * 300, "ünï", "a b", "..", ".",
                               "a%2Fb", "fuzz-missing", "0", "kubernetes", "default"])
names = st.one_of(st.sampled_from(sorted(set(FIXTURE_NAME.values()))), weird_names,
                  st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12))


def _paths_into(obj: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_paths_into(v, (*here, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_paths_into(v, (*here, i)))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """A valid object with a few fields deleted, replaced by random JSON, or added."""
    obj: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 4))):
        paths = _paths_into(obj)
        where = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["delete", "replace", "add", "wrong-type"]))
        if not where:
            if op in ("replace", "wrong-type"):
                obj = draw(json_values)
            continue
        parent = obj
        for step in where[:-1]:
            parent = parent[step]
        last = where[-1]
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = draw(json_values)
        elif op == "wrong-type":
            current = parent[last]
            parent[last] = draw(st.sampled_from([[current], {"x": current}, str(current), 7, None, True, 1.5]))
        elif isinstance(parent[last], dict):
            parent[last][draw(st.text(max_size=12))] = draw(json_values)
        elif isinstance(parent[last], list):
            parent[last].append(draw(json_values))
        else:
            parent[last] = draw(json_values)
    return obj


def _to_yaml(obj: Any, tabs: bool) -> bytes:
    lines = json.dumps(obj, indent=2).splitlines()
    text = "\n".join(line.replace("  ", "\t") if tabs else line for line in lines)
    return text.encode()


@st.composite
def bodies(draw: st.DrawFn, kind: Kind | None) -> bytes | None:
    base_kind = kind if kind is not None and draw(st.integers(0, 4)) else draw(st.sampled_from(KINDS))
    name = draw(st.one_of(st.just(FIXTURE_NAME[base_kind.plural]), names))
    obj = draw(mutated(base_kind.valid(name)))
    shape = draw(st.sampled_from(["json", "json", "json", "yaml", "yaml-tabs", "non-object", "bad-utf8", "huge",
                                  "deep", "empty", "none", "binary", "json-patch", "merge-patch", "nan"]))
    if shape == "json":
        return json.dumps(obj).encode()
    if shape == "yaml":
        return _to_yaml(obj, tabs=False)
    if shape == "yaml-tabs":
        return _to_yaml(obj, tabs=True)
    if shape == "non-object":
        return json.dumps(draw(st.one_of(json_scalars, st.lists(json_values, max_size=3)))).encode()
    if shape == "bad-utf8":
        raw = json.dumps(obj).encode()
        cut = draw(st.integers(0, len(raw)))
        return raw[:cut] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])) \
            + raw[cut:]
    if shape == "huge":
        size = draw(st.sampled_from([70_000, 1_100_000, 3_200_000]))
        obj = base_kind.valid(FIXTURE_NAME[base_kind.plural])
        obj["metadata"]["annotations"] = {"big": "x" * size}
        return json.dumps(obj).encode()
    if shape == "deep":
        depth = draw(st.sampled_from([100, 1000, 5000, 100_000]))
        return ('{"metadata":' * depth + "{}" + "}" * depth).encode()
    if shape == "empty":
        return b""
    if shape == "none":
        return None
    if shape == "binary":
        return draw(st.binary(max_size=64))
    if shape == "json-patch":
        ops = draw(st.lists(st.fixed_dictionaries({
            "op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]),
            "path": st.sampled_from(["/metadata/labels/x", "/spec", "/metadata/name", "/data/a", "", "/", "~1",
                                     "/metadata/labels/~0~1", "/spec/replicas", "/nope/deeper", "/metadata/uid"]),
            "value": json_values,
            "from": st.sampled_from(["/metadata/labels", "/data", "/x"]),
        }), max_size=3))
        return json.dumps(ops).encode()
    if shape == "merge-patch":
        return json.dumps(draw(mutated({"metadata": {"labels": {"x": "y"}}, "spec": {"replicas": 2}}))).encode()
    return json.dumps(obj).replace('"a"', "NaN", 1).encode()


CONTENT_TYPES = st.one_of(st.none(), st.sampled_from([
    "application/json", "application/json; charset=utf-8", "application/yaml", "text/yaml",
    "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json",
    "application/apply-patch+yaml", "application/vnd.kubernetes.protobuf", "text/plain", "multipart/form-data",
    "application/x-www-form-urlencoded", "*/*", "application/json;;;", ";", "application/cbor", "",
]))
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
ACCEPTS = st.one_of(st.none(), st.sampled_from([
    "application/json", "application/yaml", "*/*", TABLE, f"{TABLE}, application/json",
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io", "application/yaml;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=Table;v=v2;g=meta.k8s.io", "application/json;as=Table;g=apps",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io",
    "application/json;as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io,application/json",
    "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf;stream=watch", "text/html",
    "text/plain", "application/cbor", ";;;", ",,,", "application/json;q=0", "image/png, */*;q=0.1", "",
]), st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30))

LABEL_SELECTORS = st.one_of(st.sampled_from([
    "app=fuzz", "app!=fuzz", "app in (fuzz,x)", "app notin (x)", "app", "!app", "app==fuzz", "a.b/c=d",
    "app in ()", "app=", "=x", "app in (", "!", ",", "app=fuzz,,", "x>1", "x<1", "app = fuzz", "app=a b",
    "a" * 70 + "=b", "app in (fuzz", "app=fuzz)",
]), st.text(max_size=20))
FIELD_SELECTORS = st.one_of(st.sampled_from([
    "metadata.name=fuzz-pods", "metadata.namespace=fuzz", "metadata.name!=x", "metadata.name==x",
    "spec.nodeName=", "spec.nodeName=n1", "status.phase=Running", "type=Opaque", "spec.clusterIP=None",
    "foo=bar", "metadata.name", "=", "metadata.name=a,metadata.namespace=b", "metadata.name=a\\,b",
    "spec.unschedulable=false", "status.successful=1", "metadata.name=(x)",
]), st.text(max_size=20))


def _continue_token(payload: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


CONTINUES = st.one_of(st.sampled_from([
    "", "abc", "!!!", "eyJ9",
    _continue_token({"v": "meta.k8s.io/v1", "rv": 1, "start": "fuzz-\u0000"}),
    _continue_token({"v": "meta.k8s.io/v1", "rv": -5, "start": "a"}),
    _continue_token({"v": "meta.k8s.io/v1", "rv": 0, "start": "../../secrets/"}),
    _continue_token({"v": "meta.k8s.io/v1", "rv": 2**62, "start": "a"}),
    _continue_token({"v": "meta.k8s.io/v1", "rv": "x", "start": None}),
    _continue_token({"v": "meta.k8s.io/v1", "rv": 1.5, "start": ["a"]}),
    _continue_token({"v": "meta.k8s.io/v2", "rv": 1, "start": "a"}),
    _continue_token([1, 2]),
]), st.text(max_size=12))

# resourceVersions that cannot make the server wait (upstream waits up to 3 s for a future one, then 504).
RESOURCE_VERSIONS = st.sampled_from(["", "0", "1", "2", "-1", "abc", " ", "1e3", "0x10", "01", "1.5"])
QUERY_VALUES: dict[str, Any] = {
    "labelSelector": LABEL_SELECTORS,
    "fieldSelector": FIELD_SELECTORS,
    "resourceVersion": RESOURCE_VERSIONS,
    "resourceVersionMatch": st.sampled_from(["", "Exact", "NotOlderThan", "exact", "Bogus"]),
    "limit": st.sampled_from(["", "0", "1", "2", "-1", "abc", "500", "99999999999999999999"]),
    "continue": CONTINUES,
    "dryRun": st.sampled_from(["All", "All", "", "all", "None", "Bogus"]),
    "fieldValidation": st.sampled_from(["Strict", "Warn", "Ignore", "", "strict", "Bogus"]),
    "fieldManager": st.sampled_from(["fuzz", "", "x" * 200, "ünï"]),
    "propagationPolicy": st.sampled_from(["Orphan", "Foreground", "Background", "", "Bogus"]),
    "gracePeriodSeconds": st.sampled_from(["0", "1", "30", "-1", "abc", "", "99999999999999999999"]),
    "orphanDependents": st.sampled_from(["true", "false", "maybe"]),
    "pretty": st.sampled_from(["true", "false", "1"]),
    "includeObject": st.sampled_from(["None", "Metadata", "Object", "Bogus"]),
    "allowWatchBookmarks": st.sampled_from(["true", "false", "x"]),
    "sendInitialEvents": st.sampled_from(["true", "false", "x"]),
    "force": st.sampled_from(["true", "false"]),
    "timeoutSeconds": st.sampled_from(["1", "0", "-1", "abc"]),
}
QUERIES = st.lists(
    st.one_of(
        st.sampled_from(sorted(QUERY_VALUES)).flatmap(lambda k: st.tuples(st.just(k), QUERY_VALUES[k])),
        st.tuples(st.text(max_size=8), st.text(max_size=8)),
    ),
    max_size=5,
)
METHODS = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])


@st.composite
def resource_paths(draw: st.DrawFn) -> tuple[str, Kind | None]:
    """A collection, item or subresource path of one of KINDS, with the kind it belongs to."""
    kind = draw(st.sampled_from(KINDS))
    namespace = draw(st.sampled_from([NS, NS, NS, "default", "missing-ns", None]))
    shape = draw(st.sampled_from(["collection", "item", "item", "sub", "sub", "watch"]))
    if shape == "collection":
        return kind.collection(namespace), kind
    name = draw(st.one_of(st.just(FIXTURE_NAME[kind.plural]), names))
    item = kind.item(name, namespace)
    if shape == "item":
        return item, kind
    if shape == "watch":
        target = kind.collection(namespace) if draw(st.booleans()) else item
        return target.replace(kind.prefix, f"{kind.prefix}/watch", 1), kind
    sub = draw(st.one_of(st.sampled_from(kind.subresources or ("status",)),
                         st.sampled_from(["status", "scale", "binding", "eviction", "finalize", "log", "exec",
                                          "proxy", "bogus", "status/extra", "scale/x"])))
    return f"{item}/{sub}", kind


OTHER_PATHS = st.sampled_from([
    "/api", "/apis", "/api/v1", "/api/v2", "/apis/apps", "/apis/apps/v1", "/apis/apps/v2", "/apis/batch/v1",
    "/apis/nonexistent.example.com/v1", "/apis/apps/v1/foos", "/api/v1/foos", "/api/v1/namespaces/fuzz/foos",
    "/api/v1/namespaces/fuzz/configmaps/a/b/c/d", "/api/v1/watch", "/api/v1/watch/namespaces",
    "/api/v1/namespaces//configmaps", "/api//v1", "/apis/apps/v1/namespaces", "/apis/apps/v1/namespaces/fuzz",
    "/version", "/healthz", "/livez", "/readyz", "/foo", "/", "/openapi/v3", "/openapi/v3/api/v1",
    "/openapi/v3/apis/nope/v1", "/api/v1/namespaces/fuzz/pods/fuzz-pods/status/x",
    "/api/v1/nodes/fuzz-nodes/proxy", "/apis/apps/v1/namespaces/fuzz/deployments/fuzz-deployments/scale/x",
    "/api/v1/namespaces/fuzz/bindings",
])


@st.composite
def requests(draw: st.DrawFn, read_only: bool = False) -> Req:
    if draw(st.integers(0, 5)):
        path, kind = draw(resource_paths())
    else:
        path, kind = draw(OTHER_PATHS), None
    method = "GET" if read_only else draw(METHODS)
    params = draw(QUERIES)
    headers = {}
    content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type
    accept = draw(ACCEPTS)
    if accept is not None:
        headers["Accept"] = accept
    body = None if read_only or method in ("GET", "HEAD") else draw(bodies(kind))
    if draw(st.integers(0, 12)) == 0 or "/watch/" in path:
        if "/watch/" not in path:
            params.append(("watch", draw(st.sampled_from(["true", "1", "false"]))))
        params = [(k, v) for k, v in params if k != "timeoutSeconds"] + [("timeoutSeconds", "1")]
    elif any(k == "watch" for k, _ in params):
        params.append(("timeoutSeconds", "1"))
    return Req(method, path, params, headers, body)


@st.composite
def writes(draw: st.DrawFn) -> Req:
    """A create, update or patch of one of KINDS with a mutated body: deep validation, mostly rejected."""
    kind = draw(st.sampled_from(KINDS))
    name = FIXTURE_NAME[kind.plural]
    method = draw(st.sampled_from(["POST", "PUT", "PATCH"]))
    if method == "POST":
        path = kind.collection()
    else:
        sub = draw(st.sampled_from(["", "", "/status", *(f"/{s}" for s in kind.subresources)]))
        path = kind.item(name) + sub
    obj = draw(mutated(kind.valid(name if method != "POST" else draw(st.sampled_from([name, "fuzz-new"])))))
    content_type = "application/json"
    if method == "PATCH":
        content_type = draw(st.sampled_from(["application/merge-patch+json", "application/strategic-merge-patch+json",
                                             "application/json-patch+json"]))
    params = draw(st.lists(st.sampled_from([("dryRun", "All"), ("fieldValidation", "Strict"),
                                            ("fieldValidation", "Ignore"), ("fieldManager", "fuzz")]), max_size=2))
    return Req(method, path, params, {"Content-Type": content_type}, json.dumps(obj).encode())


# -- the properties -----------------------------------------------------------------------------------------


def test_fixture_objects_are_valid(world: World) -> None:
    """The fuzz starts from objects the apiserver accepts, so mutations probe validation, not parsing alone."""
    for k, obj in fixture_objects():
        r = world.http.get(k.item(obj["metadata"]["name"]))
        assert r.status_code == 200, r.text
        assert r.json()["kind"] == k.kind


@SETTINGS
@given(req=requests())
def test_any_request(world: World, req: Req) -> None:
    problem = problem_with(world, req)
    assert problem is None, problem


@settings(SETTINGS, max_examples=100)
@given(req=writes())
def test_mutated_writes(world: World, req: Req) -> None:
    problem = problem_with(world, req)
    assert problem is None, problem


@settings(SETTINGS, max_examples=60)
@given(req=requests(read_only=True))
def test_reads_with_random_queries(world: World, req: Req) -> None:
    problem = problem_with(world, req)
    assert problem is None, problem


# -- every kind of the catalog, every patch type: bodies shaped by upstream's schema, with nulls, wrong types,
# -- huge numbers and deep nesting where the schema has fields ------------------------------------------------

_SCALE_TARGET = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "fuzz"}, "maxReplicas": 3}
#: what a valid object of each catalog kind outside KINDS needs besides its metadata (most need nothing)
#: a webhook no request reaches (its rules name a group nothing serves, its selectors labels nothing has),
#: and one that fails open if a fuzzed change made it match, so fuzzing it changes no other write
_FUZZ_WEBHOOK = {"name": "fuzz.webhooks.pyk8s.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                 "clientConfig": {"url": "https://127.0.0.1:1/fuzz"}, "failurePolicy": "Ignore",
                 "timeoutSeconds": 1, "namespaceSelector": {"matchLabels": {"fuzz-webhooks": "never"}},
                 "objectSelector": {"matchLabels": {"fuzz-webhooks": "never"}},
                 "rules": [{"apiGroups": ["nothing.fuzz.pyk8s.io"], "apiVersions": ["v1"], "resources": ["things"],
                            "operations": ["CREATE"]}]}
_VALID_EXTRA: dict[tuple[str, str], dict[str, Any]] = {
    ("v1", "Event"): {"involvedObject": {"kind": "Pod", "name": "fuzz", "namespace": NS}, "reason": "Fuzzed",
                      "message": "m", "type": "Normal"},
    ("v1", "PersistentVolume"): {"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                          "hostPath": {"path": "/tmp/fuzz"}}},
    ("v1", "PersistentVolumeClaim"): {"spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}},
    ("v1", "PodTemplate"): {"template": _TEMPLATE},
    ("apps/v1", "ReplicaSet"): {"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "fuzz"}},
                                         "template": _TEMPLATE}},
    ("batch/v1", "CronJob"): {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {
        "spec": {"containers": [_CONTAINER], "restartPolicy": "Never"}}}}}},
    ("autoscaling/v2", "HorizontalPodAutoscaler"): {"spec": _SCALE_TARGET},
    ("autoscaling/v1", "HorizontalPodAutoscaler"): {"spec": _SCALE_TARGET},
    ("discovery.k8s.io/v1", "EndpointSlice"): {"addressType": "IPv4", "endpoints": []},
    ("events.k8s.io/v1", "Event"): {"eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "pyk8s.io/fuzz",
                                    "reportingInstance": "fuzz-1", "action": "Fuzz", "reason": "Fuzzed",
                                    "regarding": {"kind": "Pod", "name": "fuzz", "namespace": NS}, "type": "Normal"},
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                  "kind": "Role", "name": "fuzz"}},
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                         "kind": "ClusterRole", "name": "fuzz"}},
    ("networking.k8s.io/v1", "Ingress"): {"spec": {"defaultBackend": {"service": {"name": "fuzz",
                                                                                  "port": {"number": 80}}}}},
    ("networking.k8s.io/v1", "IngressClass"): {"spec": {"controller": "pyk8s.io/fuzz"}},
    ("storage.k8s.io/v1", "StorageClass"): {"provisioner": "pyk8s.io/fuzz"},
    ("scheduling.k8s.io/v1", "PriorityClass"): {"value": 10},
    ("node.k8s.io/v1", "RuntimeClass"): {"handler": "runc"},
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): {"webhooks": [_FUZZ_WEBHOOK]},
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): {"webhooks": [_FUZZ_WEBHOOK]},
    # A policy on nothing served, and a binding that only audits, so fuzzing them refuses no other write.
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): {"spec": {
        "failurePolicy": "Ignore", "validations": [{"expression": "true"}],
        "matchConstraints": {"resourceRules": [{"apiGroups": ["nothing.fuzz.pyk8s.io"], "apiVersions": ["v1"],
                                                "resources": ["things"], "operations": ["CREATE"]}]}}},
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): {"spec": {
        "policyName": "fuzz-validatingadmissionpolicies", "validationActions": ["Audit"]}},
    ("storage.k8s.io/v1", "CSIDriver"): {"spec": {}},
    ("storage.k8s.io/v1", "CSIStorageCapacity"): {"storageClassName": "fuzz"},
    ("certificates.k8s.io/v1", "CertificateSigningRequest"): {"spec": {
        "request": new_request("fuzz")[0], "signerName": "kubernetes.io/kube-apiserver-client",
        "usages": ["client auth"]}},
    ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"): {"spec": {
        "priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 5000,
        "distinguisherMethod": {"type": "ByUser"}, "rules": []}},
    ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration"): {"spec": {
        "type": "Limited", "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}}},
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): {"spec": {
        "group": "shapes.pyk8s.io", "scope": "Namespaced",
        "names": {"plural": "shapes", "singular": "shape", "kind": "Shape"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}},
    ("apiregistration.k8s.io/v1", "APIService"): {"spec": {
        "group": "fuzz.pyk8s.io", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10}},
}
#: every kind clients can create; those they can also read get a target object that writes patch and update
CATALOG = [r for r in BUILTIN if "create" in r.verbs]
_BY_KIND = {(k.api_version, k.kind): k for k in KINDS}
PATCH_TYPES = {"json": "application/json-patch+json", "merge": "application/merge-patch+json",
               "strategic": "application/strategic-merge-patch+json", "apply": "application/apply-patch+yaml"}
_DEFS = definitions.definitions()
_HUGE = st.sampled_from([2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, 1e308, -1e308, 5e-324])


#: Kinds whose name is fixed by their spec.
_FIXED_NAMES = {"CustomResourceDefinition": "shapes.shapes.pyk8s.io", "APIService": "v1.fuzz.pyk8s.io"}


def _collection(res: Resource) -> str:
    prefix = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
    return f"{prefix}/namespaces/{NS}/{res.plural}" if res.namespaced else f"{prefix}/{res.plural}"


def _target(res: Resource) -> tuple[str, dict[str, Any]]:
    """The name and a valid object of the kind's target."""
    kind = _BY_KIND.get((res.api_version, res.kind))
    if kind is not None:
        name = FIXTURE_NAME[kind.plural]
        return name, kind.valid(name)
    name = _FIXED_NAMES.get(res.kind, f"fuzz-{res.plural}")
    meta = {"name": name, **({"namespace": NS} if res.namespaced else {})}
    return name, {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta,
                  **copy.deepcopy(_VALID_EXTRA.get((res.api_version, res.kind), {}))}


def _nested(depth: int) -> Any:
    """A value `depth` levels deep (orjson, which writes objects to etcd, stops at 255)."""
    value: Any = "bottom"
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


hostile_values = st.one_of(st.none(), _HUGE, json_values, st.sampled_from([20, 100, 200]).map(_nested),
                           st.integers(1000, 5000).map(lambda n: "x" * n))


@st.composite
def shaped(draw: st.DrawFn, schema: dict[str, Any], hostile: bool, depth: int = 0) -> Any:
    """A value the OpenAPI schema describes, with a null in its place now and then and, when `hostile`, a
    wrong type, a huge number or deep nesting; nested objects and lists are what put nulls where Go's
    decoder must read them (a body with only nulls wrong gets past the type check to validation)."""
    roll = draw(st.integers(0, 11))
    if roll == 0 or roll == 1 and depth and not hostile:
        return None
    if roll == 1 and hostile:
        return draw(hostile_values)
    ref = schema.get("$ref")
    if ref:
        schema = _DEFS.get(ref.removeprefix("#/$defs/"), {})
    kinds = schema.get("type") or []
    kinds = [kinds] if isinstance(kinds, str) else kinds
    fmt = schema.get("format")
    if depth >= 5:
        return draw(json_scalars)
    if schema.get("properties"):
        props = schema["properties"]
        keys = draw(st.lists(st.sampled_from(sorted(props)), max_size=4, unique=True))
        return {k: draw(shaped(props[k], hostile, depth + 1)) for k in [*schema.get("required", ()), *keys]}
    if "array" in kinds:
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return draw(st.lists(shaped(items, hostile, depth + 1), max_size=3))
    if isinstance(schema.get("additionalProperties"), dict):
        return draw(st.dictionaries(st.sampled_from(["a", "b/c", "cpu", ""]),
                                    shaped(schema["additionalProperties"], hostile, depth + 1), max_size=2))
    if fmt == "int-or-string":
        return draw(st.one_of(st.integers(-5, 70000), st.sampled_from(["http", "25%", "80", ""]), _HUGE))
    if "string" in kinds:
        return draw(st.one_of(st.sampled_from(schema.get("enum") or ["fuzz"]),
                              st.sampled_from(["", "1Gi", "100m", "2024-01-01T00:00:00Z", "TCP", "None"]),
                              st.text(max_size=8)))
    if "integer" in kinds or "number" in kinds:
        return draw(st.one_of(st.integers(-5, 100), _HUGE))
    if "boolean" in kinds:
        return draw(st.booleans())
    return draw(json_values)


def _schema_of(res: Resource) -> dict[str, Any]:
    return _DEFS.get(definitions.by_kind().get((res.api_version, res.kind), ""), {})


@st.composite
def shaped_writes(draw: st.DrawFn) -> tuple[Resource, Req]:
    """A create, update or patch (each patch type) of any catalog kind, with a body shaped by its schema."""
    res = draw(st.sampled_from(CATALOG))
    name, valid = _target(res)
    readable = "get" in res.verbs
    verb = draw(st.sampled_from(["create", "update", *PATCH_TYPES] if readable else ["create"]))
    hostile = draw(st.booleans())
    body: Any = draw(shaped(_schema_of(res), hostile))
    if not isinstance(body, dict) or draw(st.integers(0, 2)) == 0:
        # from a valid object on: a few of its fields or list elements set to null (or to a hostile value)
        body = copy.deepcopy(valid)
        for _ in range(draw(st.integers(1, 4))):
            where = draw(st.sampled_from(_paths_into(body)[1:]))
            parent = _at(body, where[:-1])
            if isinstance(parent[where[-1]], list) and draw(st.booleans()):
                parent[where[-1]].append(None)
            else:
                parent[where[-1]] = draw(hostile_values) if hostile else None
    else:
        body = {**body, "apiVersion": res.api_version, "kind": res.kind,
                "metadata": {**(body.get("metadata") if isinstance(body.get("metadata"), dict) else {}),
                             "name": name if verb != "create" else draw(st.sampled_from([name, "fuzz-shaped"]))}}
        if res.namespaced:
            body["metadata"]["namespace"] = NS
    params = [("dryRun", "All")] if draw(st.integers(0, 3)) == 0 else []
    headers = {"Content-Type": "application/json"}
    path = _collection(res) if verb == "create" else f"{_collection(res)}/{quote(name, safe='')}"
    method = {"create": "POST", "update": "PUT"}.get(verb, "PATCH")
    if verb in PATCH_TYPES:
        headers["Content-Type"] = PATCH_TYPES[verb]
        if verb == "apply":
            params.append(("fieldManager", "fuzz"))
        elif verb == "json":
            paths = _paths_into(body)[1:] or [("metadata",)]
            body = [{"op": draw(st.sampled_from(["add", "replace"])), "path": "/" + "/".join(map(str, where)),
                     "value": draw(st.one_of(hostile_values, st.just(_at(body, where))))}
                    for where in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3))]
        elif draw(st.booleans()):
            body = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    return res, Req(method, path, params, headers, json.dumps(body).encode())


def _at(obj: Any, where: tuple[Any, ...]) -> Any:
    for step in where:
        obj = obj[step]
    return obj


def _ensure_target(world: World, res: Resource) -> None:
    """Put the kind's target object back when an earlier example deleted or broke it."""
    if "get" not in res.verbs:
        return
    name, valid = _target(res)
    if world.http.get(f"{_collection(res)}/{quote(name, safe='')}").status_code == 404:
        world.http.post(_collection(res), json=valid)


def test_every_catalog_kind_has_a_valid_target(world: World) -> None:
    """The shaped writes mutate valid objects of every readable kind, so patches reach the decoder."""
    for res in CATALOG:
        if "get" in res.verbs:
            _ensure_target(world, res)
            name, _ = _target(res)
            r = world.http.get(f"{_collection(res)}/{quote(name, safe='')}")
            assert r.status_code == 200, (res.kind, r.text)


@settings(SETTINGS, max_examples=100, deadline=timedelta(seconds=10))
@given(write=shaped_writes())
def test_shaped_writes_to_every_kind(world: World, write: tuple[Resource, Req]) -> None:
    res, req = write
    _ensure_target(world, res)
    problem = problem_with(world, req)
    assert problem is None, problem


def _nulls_everywhere(value: Any) -> Any:
    """`value` with a null appended to every list and a null for every struct the object has."""
    if isinstance(value, dict):
        return {k: _nulls_everywhere(v) for k, v in value.items()}
    if isinstance(value, list):
        return [*(_nulls_everywhere(v) for v in value), None]
    return value


def _null_fields(value: Any) -> Any:
    """`value` with every field of every object null but the ones that name it."""
    if isinstance(value, dict):
        return {k: v if k in ("apiVersion", "kind", "name", "namespace") else None for k, v in value.items()}
    return value


@pytest.mark.parametrize("verb", ["create", "update", *PATCH_TYPES])
def test_nulls_in_every_kind_and_patch_type(world: World, verb: str) -> None:
    """Every kind, every write: null elements in each of its lists, and each of its top-level fields null."""
    for res in CATALOG:
        if verb != "create" and "get" not in res.verbs:
            continue
        _ensure_target(world, res)
        name, valid = _target(res)
        item = f"{_collection(res)}/{quote(name, safe='')}"
        for body in (_nulls_everywhere(valid), {**_null_fields(valid), "metadata": valid["metadata"]}):
            if verb == "create":
                body = {**body, "metadata": {**body["metadata"], "name": "fuzz-nulls"}}
                req = Req("POST", _collection(res), [("dryRun", "All")], {"Content-Type": "application/json"},
                          json.dumps(body).encode())
            elif verb == "update":
                current = world.http.get(item).json()["metadata"]
                body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["resourceVersion"]}}
                req = Req("PUT", item, [], {"Content-Type": "application/json"}, json.dumps(body).encode())
            elif verb == "json":
                ops = [{"op": "replace", "path": f"/{k}", "value": v} for k, v in body.items() if k != "metadata"]
                req = Req("PATCH", item, [], {"Content-Type": PATCH_TYPES[verb]}, json.dumps(ops).encode())
            else:
                params = [("fieldManager", "fuzz"), ("force", "true")] if verb == "apply" else []
                req = Req("PATCH", item, params, {"Content-Type": PATCH_TYPES[verb]}, json.dumps(body).encode())
            problem = problem_with(world, req)
            assert problem is None, problem

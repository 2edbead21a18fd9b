"""The OpenAPI documents: their shape as kubectl reads it, and the HTTP behaviour of the router."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from apiserver.endpoints.openapi import spec as openapi
from services.api.catalog import BUILTIN, Catalog, Resource

CRONTAB = Resource(
    group="stable.example.com",
    version="v1",
    kind="CronTab",
    plural="crontabs",
    singular="crontab",
    namespaced=True,
    subresources=("status", "scale"),
    custom=True,
)


def resolve(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def all_refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value)
            else:
                found |= all_refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= all_refs(value)
    return found


def params(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in op.get("parameters", [])}


@pytest.fixture(scope="module")
def core_v1() -> dict[str, Any]:
    doc = openapi.build_v3(list(BUILTIN), "api/v1")
    assert doc is not None
    return doc


@pytest.fixture(scope="module")
def apps_v1() -> dict[str, Any]:
    doc = openapi.build_v3(list(BUILTIN), "apis/apps/v1")
    assert doc is not None
    return doc


def test_definitions_undo_the_json_schema_conversion() -> None:
    defs = openapi.definitions()
    assert defs.version == "v1.32.0"
    pod = defs.schemas["io.k8s.api.core.v1.Pod"]
    assert pod["type"] == "object"
    assert "enum" not in pod["properties"]["apiVersion"]
    assert pod["properties"]["spec"]["$ref"] == "io.k8s.api.core.v1.PodSpec"
    assert defs.by_gvk[("apps", "v1", "Deployment")] == "io.k8s.api.apps.v1.Deployment"
    assert ("", "v1", "DeleteOptions") not in defs.by_gvk


def test_core_paths_follow_upstream(core_v1: dict[str, Any]) -> None:
    paths = core_v1["paths"]
    pods = paths["/api/v1/namespaces/{namespace}/pods"]
    assert pods["get"]["operationId"] == "listCoreV1NamespacedPod"
    assert pods["get"]["x-kubernetes-action"] == "list"
    assert pods["post"]["x-kubernetes-action"] == "post"
    assert pods["delete"]["x-kubernetes-action"] == "deletecollection"
    assert {"labelSelector", "limit", "continue", "watch"} <= set(params(pods["get"]))
    assert paths["/api/v1/pods"]["get"]["operationId"] == "listCoreV1PodForAllNamespaces"
    assert paths["/api/v1/watch/namespaces/{namespace}/pods/{name}"]["get"]["x-kubernetes-action"] == "watch"
    assert paths["/api/v1/watch/pods"]["get"]["x-kubernetes-action"] == "watchlist"
    item = paths["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert set(item) == {"parameters", "get", "put", "patch", "delete"}
    assert {p["name"] for p in item["parameters"]} == {"name", "namespace", "pretty"}
    nodes = paths["/api/v1/nodes/{name}"]
    assert "namespace" not in {p["name"] for p in nodes["parameters"]}
    assert "/api/v1/namespaces/{namespace}/nodes" not in paths
    # Binding is create-only: no list, no item path.
    assert set(paths["/api/v1/namespaces/{namespace}/bindings"]) == {"parameters", "post"}
    assert "/api/v1/namespaces/{namespace}/bindings/{name}" not in paths


def test_patch_operations_declare_field_validation(core_v1: dict[str, Any]) -> None:
    """kubectl sends fieldValidation=Strict only if the PATCH operation of the kind declares it."""
    patch = core_v1["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "Pod", "version": "v1"}
    assert patch["x-kubernetes-action"] == "patch"
    query = {name for name, p in params(patch).items() if p["in"] == "query"}
    assert {"fieldValidation", "dryRun", "fieldManager", "force"} <= query
    content = patch["requestBody"]["content"]
    assert "application/strategic-merge-patch+json" in content
    assert "application/apply-patch+yaml" in content
    put = core_v1["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["put"]
    assert "force" not in params(put) and "fieldValidation" in params(put)


def test_subresources(core_v1: dict[str, Any], apps_v1: dict[str, Any]) -> None:
    paths = core_v1["paths"]
    status = paths["/api/v1/namespaces/{namespace}/pods/{name}/status"]
    assert set(status) == {"parameters", "get", "put", "patch"}
    assert status["patch"]["operationId"] == "patchCoreV1NamespacedPodStatus"
    log = paths["/api/v1/namespaces/{namespace}/pods/{name}/log"]["get"]
    assert {"container", "follow", "tailLines"} <= set(params(log))
    exec_ = paths["/api/v1/namespaces/{namespace}/pods/{name}/exec"]
    assert exec_["post"]["x-kubernetes-action"] == "connect"
    assert exec_["get"]["x-kubernetes-group-version-kind"]["kind"] == "PodExecOptions"
    eviction = paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"]
    assert eviction["x-kubernetes-group-version-kind"] == {"group": "policy", "kind": "Eviction", "version": "v1"}
    assert "/api/v1/namespaces/{namespace}/services/{name}/proxy/{path}" in paths
    assert set(paths["/api/v1/namespaces/{name}/finalize"]) == {"parameters", "put"}
    scale = apps_v1["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"]
    assert scale["x-kubernetes-group-version-kind"] == {"group": "autoscaling", "kind": "Scale", "version": "v1"}
    ref = scale["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"


def test_components_are_complete_and_carry_merge_metadata(core_v1: dict[str, Any]) -> None:
    for ref in all_refs(core_v1):
        assert ref.startswith("#/components/schemas/")
        resolve(core_v1, ref)
    schemas = core_v1["components"]["schemas"]
    assert "io.k8s.api.apps.v1.Deployment" not in schemas
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert pod["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]
    assert pod["properties"]["kind"] == {"description": pod["properties"]["kind"]["description"], "type": "string"}
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    assert containers["items"] == {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}
    int_or_string = schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert int_or_string["format"] == "int-or-string" and len(int_or_string["oneOf"]) == 2
    assert core_v1["openapi"] == "3.0.0"


def test_custom_resources_get_permissive_schemas() -> None:
    resources = [*BUILTIN, CRONTAB]
    doc = openapi.build_v3(resources, "apis/stable.example.com/v1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    crontab = schemas["com.example.stable.v1.CronTab"]
    assert crontab["x-kubernetes-preserve-unknown-fields"] is True
    assert crontab["x-kubernetes-group-version-kind"] == [
        {"group": "stable.example.com", "kind": "CronTab", "version": "v1"}
    ]
    assert "metadata" in crontab["properties"]
    listing = schemas["com.example.stable.v1.CronTabList"]
    assert listing["properties"]["items"]["items"] == {"$ref": "#/components/schemas/com.example.stable.v1.CronTab"}
    item = doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
    assert item["patch"]["operationId"] == "patchStableExampleComV1NamespacedCronTab"
    assert "fieldValidation" in params(item["patch"])
    # Custom resources take no strategic merge patch; kubectl falls back to a merge patch.
    assert "application/strategic-merge-patch+json" not in item["patch"]["requestBody"]["content"]
    for ref in all_refs(doc):
        resolve(doc, ref)


def test_document_keys_and_unknown_group_versions() -> None:
    keys = openapi.document_keys([*BUILTIN, CRONTAB])
    assert {"api", "api/v1", "apis", "apis/apps", "apis/apps/v1", "apis/stable.example.com/v1"} <= set(keys)
    assert openapi.build_v3(list(BUILTIN), "apis/stable.example.com/v1") is None
    assert openapi.build_v3(list(BUILTIN), "apis/apps/v2") is None
    group = openapi.build_v3(list(BUILTIN), "apis/apps")
    assert group is not None and group["paths"]["/apis/apps/"]["get"]["operationId"] == "getAppsAPIGroup"
    assert openapi.build_v3(list(BUILTIN), "api") is not None


def test_v2_document() -> None:
    doc = openapi.build_v2([*BUILTIN, CRONTAB])
    assert doc["swagger"] == "2.0"
    for ref in all_refs(doc):
        assert ref.startswith("#/definitions/")
        resolve(doc, ref)
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    body = [p for p in patch["parameters"] if p["in"] == "body"]
    assert body == [
        {
            "name": "body",
            "in": "body",
            "required": True,
            "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"},
        }
    ]
    assert "application/strategic-merge-patch+json" in patch["consumes"]
    assert params(patch)["fieldValidation"]["type"] == "string"
    assert patch["responses"]["200"]["schema"] == {"$ref": "#/definitions/io.k8s.api.apps.v1.Deployment"}
    defs = doc["definitions"]
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"] == "string"
    assert "oneOf" not in defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]
    meta = defs["io.k8s.api.core.v1.Pod"]["properties"]["metadata"]
    assert meta["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "properties" not in defs["com.example.stable.v1.CronTab"]


def decode(data: bytes) -> list[tuple[int, Any]]:
    """A bare protobuf wire decoder: (field number, int or bytes) pairs."""
    out: list[tuple[int, Any]] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(data):
        key = varint()
        wire = key & 7
        if wire == 0:
            out.append((key >> 3, varint()))
        elif wire == 2:
            length = varint()
            out.append((key >> 3, data[pos : pos + length]))
            pos += length
        else:
            assert wire == 1
            out.append((key >> 3, data[pos : pos + 8]))
            pos += 8
    return out


def test_v2_protobuf_follows_gnostic_field_numbers() -> None:
    data = openapi.encode_v2_protobuf(openapi.build_v2(list(BUILTIN)))
    top = decode(data)
    assert top[0] == (1, b"2.0")
    definitions = {}
    for number, named in decode(dict(top)[9]):
        assert number == 1
        fields = dict(decode(named))
        definitions[fields[1].decode()] = decode(fields[2])
    pod = definitions["io.k8s.api.core.v1.Pod"]
    extensions = {}
    for number, named in pod:
        if number == 31:
            fields = dict(decode(named))
            extensions[fields[1].decode()] = orjson.loads(dict(decode(fields[2]))[2])
    assert extensions["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert dict(decode(dict(pod)[22])) == {1: b"object"}
    paths = [dict(decode(p))[1].decode() for n, p in top if n == 8 for _, p in decode(p)]
    assert "/api/v1/namespaces/{namespace}/pods/{name}" in paths


def test_varint_encoding() -> None:
    assert openapi._varint(1) == b"\x01"
    assert openapi._varint(300) == b"\xac\x02"
    assert openapi._varint(-1) == b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize(
    ("accept", "offers", "chosen"),
    [
        ("", (openapi.JSON,), openapi.JSON),
        ("application/json, */*", (openapi.JSON,), openapi.JSON),
        ("*/*", (openapi.JSON,), openapi.JSON),
        ("application/com.github.proto-openapi.spec.v3@v1.0+protobuf", (openapi.JSON,), None),
        ("application/json;q=0, text/plain", (openapi.JSON,), None),
        (openapi.PROTOBUF_V2, (openapi.JSON, openapi.PROTOBUF_V2), openapi.PROTOBUF_V2),
        (f"{openapi.PROTOBUF_V2}, application/json", (openapi.JSON, openapi.PROTOBUF_V2), openapi.PROTOBUF_V2),
        ("application/yaml, application/*", (openapi.JSON, openapi.PROTOBUF_V2), openapi.JSON),
    ],
)
def test_negotiate(accept: str, offers: tuple[str, ...], chosen: str | None) -> None:
    assert openapi.negotiate(accept, offers) == chosen


@pytest.fixture
def app() -> FastAPI:
    app = FastAPI()
    app.include_router(openapi.router)
    app.state.catalog = Catalog(BUILTIN)
    app.state.catalog_generation = 1
    return app


@pytest.fixture
async def client(app: FastAPI) -> Any:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


async def test_index_hashes_and_etags(client: httpx.AsyncClient) -> None:
    index = await client.get("/openapi/v3")
    assert index.status_code == 200
    url = index.json()["paths"]["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=")
    doc = await client.get(url)
    assert doc.status_code == 200
    assert doc.headers["content-type"] == "application/json"
    assert doc.headers["cache-control"] == "public, immutable"
    assert doc.headers["etag"] == f'"{url.rpartition("=")[2]}"'
    assert "/apis/apps/v1/namespaces/{namespace}/deployments" in doc.json()["paths"]
    again = await client.get(url, headers={"If-None-Match": doc.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    stale = await client.get("/openapi/v3/apis/apps/v1?hash=0123")
    assert stale.status_code == 301
    assert stale.headers["location"] == url
    plain = await client.get("/openapi/v3/apis/apps/v1")
    assert plain.status_code == 200 and plain.headers["cache-control"] == "no-cache, private"
    assert plain.content == doc.content


async def test_unknown_group_version_is_a_404_status(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi/v3/apis/nope.example.com/v1")
    assert response.status_code == 404
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404


async def test_protobuf_only_accept(client: httpx.AsyncClient) -> None:
    v3 = await client.get(
        "/openapi/v3/api/v1", headers={"Accept": "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"}
    )
    assert v3.status_code == 406
    assert v3.json()["reason"] == "NotAcceptable"
    v2 = await client.get("/openapi/v2", headers={"Accept": openapi.PROTOBUF_V2})
    assert v2.status_code == 200
    assert v2.headers["content-type"] == "application/octet-stream"
    assert v2.content[:5] == b"\x0a\x032.0"
    v2_json = await client.get("/openapi/v2", headers={"Accept": "application/json"})
    assert v2_json.json()["swagger"] == "2.0"
    assert v2_json.headers["etag"] != v2.headers["etag"]


async def test_documents_follow_the_catalog_generation(app: FastAPI, client: httpx.AsyncClient) -> None:
    before = (await client.get("/openapi/v3")).json()["paths"]
    assert "apis/stable.example.com/v1" not in before
    assert (await client.get("/openapi/v3/apis/stable.example.com/v1")).status_code == 404
    app.state.catalog.add(CRONTAB)
    app.state.catalog_generation += 1
    after = (await client.get("/openapi/v3")).json()["paths"]
    assert "apis/stable.example.com/v1" in after
    assert after["api/v1"] == before["api/v1"]
    doc = await client.get(after["apis/stable.example.com/v1"]["serverRelativeURL"])
    assert "com.example.stable.v1.CronTab" in doc.json()["components"]["schemas"]
    v2 = (await client.get("/openapi/v2")).json()
    assert "/apis/stable.example.com/v1/crontabs" in v2["paths"]


def test_cache_keeps_documents_whose_inputs_did_not_change() -> None:
    cache = openapi.DocumentCache()
    builtin = list(BUILTIN)
    core = cache.get(1, builtin, "v3", "api/v1")
    assert cache.get(1, builtin, "v3", "apis/stable.example.com/v1") is None
    index = cache.get(1, builtin, "index")
    with_crd = [*builtin, CRONTAB]
    assert cache.get(2, with_crd, "v3", "api/v1") is core
    custom = cache.get(2, with_crd, "v3", "apis/stable.example.com/v1")
    assert custom is not None
    assert cache.get(2, with_crd, "index") != index
    changed = dataclasses.replace(CRONTAB, subresources=("status",))
    again = cache.get(3, [*builtin, changed], "v3", "apis/stable.example.com/v1")
    assert again is not None and again.etag != custom.etag
    assert b"/scale" not in again.body and b"/scale" in custom.body

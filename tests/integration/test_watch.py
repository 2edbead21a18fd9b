"""Watch semantics against a real apiserver and etcd: framing, filters, bookmarks, initial events, 410."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_apiserver


def _ns(client: httpx.Client) -> str:
    name = f"w-{uuid.uuid4().hex[:8]}"
    r = client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def _events(client: httpx.Client, path: str, params: dict[str, str], want: int, timeout: float = 10) -> list[dict]:
    """Read watch events until `want` have arrived (or the server closes the stream)."""
    out: list[dict] = []
    with client.stream("GET", path, params={"watch": "true", **params}, timeout=timeout) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("application/json")
        for line in resp.iter_lines():
            if not line:
                continue
            out.append(json.loads(line))
            if len(out) >= want:
                break
    return out


@pytest.fixture
def client(apiserver: str) -> httpx.Client:
    with httpx.Client(base_url=apiserver, timeout=10) as c:
        yield c


def test_watch_from_resource_version_sees_later_changes_in_order(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    rv = client.get(path).json()["metadata"]["resourceVersion"]
    client.post(path, json={"metadata": {"name": "a"}, "data": {"x": "1"}})
    client.patch(f"{path}/a", json={"data": {"x": "2"}}, headers={"content-type": "application/merge-patch+json"})
    client.delete(f"{path}/a")
    events = _events(client, path, {"resourceVersion": rv}, 3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    assert events[1]["object"]["data"] == {"x": "2"}


def test_watch_without_resource_version_starts_with_current_state(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    for name in ("b", "a"):
        client.post(path, json={"metadata": {"name": name}})
    events = _events(client, path, {}, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_label_selector_turns_unmatching_updates_into_deletes(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    rv = client.get(path).json()["metadata"]["resourceVersion"]
    client.post(path, json={"metadata": {"name": "c", "labels": {"app": "x"}}})
    client.patch(f"{path}/c", json={"metadata": {"labels": {"app": "y"}}},
                 headers={"content-type": "application/merge-patch+json"})
    client.patch(f"{path}/c", json={"metadata": {"labels": {"app": "x"}}},
                 headers={"content-type": "application/merge-patch+json"})
    events = _events(client, path, {"resourceVersion": rv, "labelSelector": "app=x"}, 3)
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]


def test_send_initial_events_ends_with_bookmark(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    client.post(path, json={"metadata": {"name": "d"}})
    events = _events(client, path, {"sendInitialEvents": "true", "allowWatchBookmarks": "true",
                                    "resourceVersionMatch": "NotOlderThan", "resourceVersion": ""}, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"])


def test_send_initial_events_requires_not_older_than(client: httpx.Client) -> None:
    r = client.get("/api/v1/configmaps", params={"watch": "true", "sendInitialEvents": "true",
                                                  "allowWatchBookmarks": "true"})
    assert r.status_code == 422
    assert r.json()["kind"] == "Status"


def test_timeout_seconds_ends_the_stream(client: httpx.Client) -> None:
    ns = _ns(client)
    started = time.monotonic()
    r = client.get(f"/api/v1/namespaces/{ns}/configmaps", params={"watch": "1", "timeoutSeconds": "1",
                                                                    "resourceVersion": "0"})
    assert r.status_code == 200 and r.content == b""
    assert 0.9 <= time.monotonic() - started < 5


def test_bookmarks_carry_the_current_revision(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/secrets"
    rv = client.get(path).json()["metadata"]["resourceVersion"]
    events = _events(client, path, {"resourceVersion": rv, "allowWatchBookmarks": "true",
                                    "timeoutSeconds": "12"}, 1, timeout=15)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["kind"] == "Secret"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_watch_of_one_object_by_field_selector(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    rv = client.get(path).json()["metadata"]["resourceVersion"]
    for name in ("e1", "e", "e2"):
        client.post(path, json={"metadata": {"name": name}})
    events = _events(client, path, {"resourceVersion": rv, "fieldSelector": "metadata.name=e",
                                    "timeoutSeconds": "2"}, 5)
    assert [e["object"]["metadata"]["name"] for e in events] == ["e"]


def test_watch_from_compacted_revision_is_gone(etcd_server: str, workdir: Path) -> None:
    server = start_apiserver([etcd_server], workdir / "compacting", "--etcd-compaction-interval", "1")
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            ns = _ns(c)
            path = f"/api/v1/namespaces/{ns}/configmaps"
            old_rv = c.post(path, json={"metadata": {"name": "old"}}).json()["metadata"]["resourceVersion"]
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                c.post(path, json={"metadata": {"generateName": "tick-"}})
                r = c.get(path, params={"watch": "true", "resourceVersion": old_rv, "timeoutSeconds": "1"})
                first = json.loads(r.content.splitlines()[0]) if r.content else {}
                if first.get("type") == "ERROR":
                    break
                time.sleep(0.5)
            assert first["type"] == "ERROR", "no compaction seen"
            assert first["object"]["code"] == 410 and first["object"]["reason"] == "Expired"
            assert first["object"]["message"].startswith(f"too old resource version: {old_rv}")
            r = c.get(path)
            assert r.status_code == 200 and any(i["metadata"]["name"] == "old" for i in r.json()["items"])
    finally:
        server.stop()


def test_table_watch_sends_columns_once(client: httpx.Client) -> None:
    ns = _ns(client)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    rv = client.get(path).json()["metadata"]["resourceVersion"]
    client.post(path, json={"metadata": {"name": "t1"}, "data": {"a": "b"}})
    client.post(path, json={"metadata": {"name": "t2"}})
    client.headers["accept"] = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    try:
        events = _events(client, path, {"resourceVersion": rv}, 2)
    finally:
        del client.headers["accept"]
    first, second = (e["object"] for e in events)
    assert first["kind"] == "Table" and [c["name"] for c in first["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert first["rows"][0]["cells"][:2] == ["t1", 1]
    assert not second.get("columnDefinitions")

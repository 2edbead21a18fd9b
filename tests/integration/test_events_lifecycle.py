"""The events.k8s.io/v1 lifecycle the conformance suite walks (test/e2e/instrumentation/events.go):
an event read back, patched and updated equals what was written, its series and reporting fields
included, and the mapping to core/v1 round-trips every field."""

from __future__ import annotations

import json
from typing import Any

import httpx

MERGE = {"content-type": "application/merge-patch+json"}
VOLATILE = ("resourceVersion", "managedFields")


def _comparable(event: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in event["metadata"].items() if k not in VOLATILE}
    return {**event, "metadata": meta}


def test_event_is_fetched_patched_updated_and_listed(apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}/apis/events.k8s.io/v1/namespaces/{unique_ns}/events"
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
             "metadata": {"name": "event-test", "labels": {"testevent-set": "true"}},
             "regarding": {"namespace": unique_ns}, "eventTime": "2017-09-19T13:49:16.000000Z",
             "note": "This is event-test", "action": "Do", "reason": "Test", "type": "Normal",
             "reportingController": "test-controller", "reportingInstance": "test-node"}
    r = httpx.post(base, json=event)
    assert r.status_code == 201, r.text
    created = r.json()
    got = httpx.get(f"{base}/event-test").json()
    assert _comparable(got) == _comparable(created)
    for key in ("regarding", "eventTime", "note", "action", "reason", "type", "reportingController",
                "reportingInstance"):
        assert got[key] == event[key], key

    series = {"count": 2, "lastObservedTime": "2017-09-19T13:49:11.000000Z"}
    r = httpx.patch(f"{base}/event-test", content=json.dumps({"series": series}), headers=MERGE)
    assert r.status_code == 200, r.text
    got = httpx.get(f"{base}/event-test").json()
    assert _comparable(got) == {**_comparable(created), "series": series}

    got["series"] = {"count": 100, "lastObservedTime": "2017-09-19T13:49:01.000000Z"}
    r = httpx.put(f"{base}/event-test", json=got)
    assert r.status_code == 200, r.text
    updated = httpx.get(f"{base}/event-test").json()
    assert updated["series"] == got["series"] and updated["reportingController"] == "test-controller"
    assert updated["regarding"] == {"namespace": unique_ns}

    everywhere = httpx.get(f"{apiserver}/apis/events.k8s.io/v1/events",
                           params={"labelSelector": "testevent-set=true"}).json()
    assert [e["metadata"]["name"] for e in everywhere["items"]] == ["event-test"]
    assert httpx.delete(f"{base}/event-test").status_code == 200
    assert httpx.get(base, params={"labelSelector": "testevent-set=true"}).json()["items"] == []


def test_v1_and_core_events_round_trip(apiserver: str, unique_ns: str) -> None:
    new_style = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "both"},
                 "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/ctl",
                 "reportingInstance": "ctl-1", "action": "Act", "reason": "Because", "type": "Warning",
                 "note": "n", "regarding": {"kind": "Pod", "namespace": unique_ns, "name": "p", "uid": "u1",
                                             "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
                 "related": {"kind": "Node", "name": "n1"},
                 "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
                 "deprecatedSource": {"component": "ctl", "host": "h"},
                 "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
                 "deprecatedLastTimestamp": "2026-01-01T00:01:00Z", "deprecatedCount": 3}
    r = httpx.post(f"{apiserver}/apis/events.k8s.io/v1/namespaces/{unique_ns}/events", json=new_style)
    assert r.status_code == 201, r.text
    core = httpx.get(f"{apiserver}/api/v1/namespaces/{unique_ns}/events/both").json()
    assert core["reportingComponent"] == "example.com/ctl" and core["reportingInstance"] == "ctl-1"
    assert core["involvedObject"] == new_style["regarding"] and core["related"] == new_style["related"]
    assert core["message"] == "n" and core["source"] == {"component": "ctl", "host": "h"}
    assert core["firstTimestamp"] == "2026-01-01T00:00:00Z" and core["lastTimestamp"] == "2026-01-01T00:01:00Z"
    assert core["count"] == 3 and core["series"] == new_style["series"]
    r = httpx.put(f"{apiserver}/api/v1/namespaces/{unique_ns}/events/both", json=core)
    assert r.status_code == 200, r.text
    back = httpx.get(f"{apiserver}/apis/events.k8s.io/v1/namespaces/{unique_ns}/events/both").json()
    for key, value in new_style.items():
        if key != "metadata":
            assert back[key] == value, key

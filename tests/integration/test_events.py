"""Both Event APIs share storage: an event written through one is read through the other and by
`kubectl describe`, which looks events up by field selectors on involvedObject."""

from __future__ import annotations

import json

import httpx

from services.api.meta import now_micro
from tests.conftest import Kubectl


def test_events_k8s_io_event_shows_in_core_api_and_describe(kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    kubectl.run("-n", unique_ns, "run", "ev", "--image=busybox")
    uid = kubectl.json("-n", unique_ns, "get", "pod", "ev")["metadata"]["uid"]
    event = {
        "metadata": {"name": "ev.1"}, "eventTime": now_micro(), "reportingController": "pyk8s-test",
        "reportingInstance": "t1", "action": "Testing", "reason": "Tested", "type": "Normal",
        "note": "hello from events.k8s.io",
        "regarding": {"kind": "Pod", "namespace": unique_ns, "name": "ev", "uid": uid, "apiVersion": "v1"},
    }
    r = httpx.post(f"{apiserver}/apis/events.k8s.io/v1/namespaces/{unique_ns}/events", json=event)
    assert r.status_code == 201, r.text
    core = httpx.get(f"{apiserver}/api/v1/namespaces/{unique_ns}/events/ev.1").json()
    assert core["apiVersion"] == "v1" and core["message"] == "hello from events.k8s.io"
    assert core["involvedObject"]["uid"] == uid and core["reportingComponent"] == "pyk8s-test"
    selected = httpx.get(f"{apiserver}/api/v1/namespaces/{unique_ns}/events",
                         params={"fieldSelector": f"involvedObject.name=ev,involvedObject.uid={uid}"}).json()
    assert [e["metadata"]["name"] for e in selected["items"]] == ["ev.1"]
    described = kubectl.run("-n", unique_ns, "describe", "pod", "ev").stdout
    assert "Tested" in described and "hello from events.k8s.io" in described

    core_event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev.2"}, "type": "Warning",
                  "reason": "Older", "message": "from core/v1", "count": 3, "source": {"component": "legacy"},
                  "involvedObject": {"kind": "Pod", "namespace": unique_ns, "name": "ev", "uid": uid}}
    kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=json.dumps(core_event))
    new = httpx.get(f"{apiserver}/apis/events.k8s.io/v1/namespaces/{unique_ns}/events/ev.2").json()
    assert new["note"] == "from core/v1" and new["deprecatedCount"] == 3
    assert new["deprecatedSource"] == {"component": "legacy"} and new["regarding"]["name"] == "ev"

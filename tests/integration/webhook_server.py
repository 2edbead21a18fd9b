"""A real admission webhook for the tests: an HTTPS server (uvicorn, a certificate of the test's own CA)
that answers AdmissionReview v1 as webhooks in the wild do. What it does depends on the path:

- `/mutate`: labels the object `mutated-by=test-webhook` (a JSONPatch), with a warning and an audit
  annotation;
- `/validate`: refuses an object labelled `bad=true` (403, its own message) and the deletion of one
  labelled `protected=true`, allows the rest;
- `/stamp`: annotates the object with the sorted keys of its labels (for reinvocation);
- `/label-later`: labels the object `added-later=yes`;
- `/strip-tolerations`: empties a pod's tolerations (which a built-in plugin then puts back);
- `/slow`: answers after 5 s (for timeouts);
- `/garbage`: answers something that is not an AdmissionReview.

`GET /calls` lists what it was asked (path, operation, kind, name, namespace, subresource, dry run, user
and whether an old object came with it), so a test can tell whether a webhook was called at all.

Run: python tests/integration/webhook_server.py HOST PORT CERT KEY
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from typing import Any

import uvicorn

CALLS: list[dict[str, Any]] = []


def _labels(obj: Any) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def _add_label(obj: dict[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    if not (obj.get("metadata") or {}).get("labels"):
        return [{"op": "add", "path": "/metadata/labels", "value": {key: value}}]
    return [{"op": "add", "path": f"/metadata/labels/{key.replace('~', '~0').replace('/', '~1')}", "value": value}]


async def _answer(path: str, req: dict[str, Any]) -> dict[str, Any]:
    obj, old = req.get("object"), req.get("oldObject")
    out: dict[str, Any] = {"uid": req["uid"], "allowed": True}
    if path == "/mutate" and obj is not None:
        out.update(_patch(_add_label(obj, "mutated-by", "test-webhook")))
        out["warnings"] = ["mutated by the test webhook"]
        out["auditAnnotations"] = {"mutated": "yes"}
    elif path == "/validate":
        if _labels(obj).get("bad") == "true":
            out = {"uid": req["uid"], "allowed": False,
                   "status": {"code": 403, "message": "objects labelled bad=true are not allowed"}}
        elif req["operation"] == "DELETE" and _labels(old).get("protected") == "true":
            out = {"uid": req["uid"], "allowed": False, "status": {"message": "protected objects stay"}}
    elif path == "/stamp" and obj is not None:
        stamp = ",".join(sorted(_labels(obj)))
        annotations = (obj.get("metadata") or {}).get("annotations")
        op = {"op": "add", "path": "/metadata/annotations", "value": {"stamp": stamp}} if not annotations else \
            {"op": "add", "path": "/metadata/annotations/stamp", "value": stamp}
        out.update(_patch([op]))
    elif path == "/strip-tolerations" and obj is not None:
        out.update(_patch([{"op": "add", "path": "/spec/tolerations", "value": []}]))
    elif path == "/label-later" and obj is not None:
        out.update(_patch(_add_label(obj, "added-later", "yes")))
    elif path == "/slow":
        await asyncio.sleep(5)
    elif path == "/garbage":
        return {"hello": "world"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": out}


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if scope["method"] == "GET" and path == "/calls":
        payload = json.dumps(CALLS).encode()
    else:
        review = json.loads(await _body(receive))
        req = review["request"]
        CALLS.append({"path": path, "operation": req["operation"], "kind": req["kind"]["kind"],
                      "version": req["resource"]["version"], "requestVersion": req["requestResource"]["version"],
                      "objectVersion": (req.get("object") or req.get("oldObject") or {}).get("apiVersion"),
                      "name": req.get("name", ""), "namespace": req.get("namespace", ""),
                      "subResource": req.get("subResource", ""), "dryRun": req.get("dryRun"),
                      "user": req["userInfo"].get("username", ""), "hasOld": req.get("oldObject") is not None,
                      "restartPolicy": ((req.get("object") or {}).get("spec") or {}).get("restartPolicy"),
                      "query": scope.get("query_string", b"").decode(), "host": dict(scope["headers"]).get(
                          b"host", b"").decode()})
        payload = json.dumps(await _answer(path, req)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


if __name__ == "__main__":
    host, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    uvicorn.run(app, host=host, port=port, ssl_certfile=cert, ssl_keyfile=key, log_level="warning",
                access_log=False)

"""admission.k8s.io/v1 AdmissionReview: the request a webhook gets, the checks its answer must pass, and
the errors upstream answers the client with (a denial's `Status`, a failed call's 500, dry-run refusals).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from apiserver.admission.interfaces import CREATE, DELETE, UPDATE, Attributes
from apiserver.registry import conversion
from services.api import errors
from services.api.catalog import Catalog, Resource
from services.auth.identity import UserInfo

Obj = dict[str, Any]

API_VERSION = "admission.k8s.io/v1"
#: the AdmissionReview versions pyk8s speaks (v1beta1's request and response have v1's fields)
VERSIONS = {"v1": API_VERSION, "v1beta1": "admission.k8s.io/v1beta1"}


def review_version(preferred: list[str] | None) -> str:
    """The first of a webhook's admissionReviewVersions the apiserver speaks, as upstream picks it."""
    return next((VERSIONS[v] for v in preferred or () if v in VERSIONS), API_VERSION)
_OPTIONS_KIND = {CREATE: "CreateOptions", UPDATE: "UpdateOptions", DELETE: "DeleteOptions"}


def _gvk(res: Resource) -> Obj:
    return {"group": res.group, "version": res.version, "kind": res.kind}


def _gvr(res: Resource) -> Obj:
    return {"group": res.group, "version": res.version, "resource": res.plural}


def _user(user: UserInfo | None) -> Obj:
    if user is None:
        return {}
    return user.to_dict()


def in_version(obj: Obj | None, res: Resource, catalog: Catalog | None) -> Obj | None:
    """`obj` as `res`'s version serves it: under matchPolicy Equivalent a webhook or policy gets the
    version its rules name, whichever version the client wrote (or the store keeps)."""
    if obj is None or catalog is None or obj.get("apiVersion") == res.api_version:
        return obj
    current = catalog.by_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    if current is None or current.etcd_prefix != res.etcd_prefix:
        return obj
    return conversion.from_storage(res, conversion.to_storage(current, obj))


def cel_request(review: Obj) -> Obj:
    """The `request` variable of admission CEL: the AdmissionRequest without the objects, which CEL has
    as `object` and `oldObject`, as upstream's CreateAdmissionRequest leaves them out."""
    return {k: v for k, v in review["request"].items() if k not in ("object", "oldObject")}


def request(a: Attributes, seen_as: Resource, user: UserInfo | None, api_version: str = API_VERSION,
            catalog: Catalog | None = None) -> Obj:
    """The AdmissionReview a webhook gets; `seen_as` is the resource its rules matched (an equivalent one
    under matchPolicy Equivalent, the objects converted to it), the request's own is in
    requestKind/requestResource."""
    options: Obj | None = None
    kind = _OPTIONS_KIND.get(a.operation)
    if kind is not None:
        options = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if a.dry_run:
            options["dryRun"] = ["All"]
    req: Obj = {
        "uid": str(uuid.uuid4()),
        "kind": _gvk(seen_as),
        "resource": _gvr(seen_as),
        "requestKind": _gvk(a.resource),
        "requestResource": _gvr(a.resource),
        "name": a.name if a.operation != CREATE or (a.obj or {}).get("metadata", {}).get("name") else "",
        "operation": a.operation,
        "userInfo": _user(user),
        "object": in_version(a.obj, seen_as, catalog),
        "oldObject": in_version(a.old, seen_as, catalog),
        "dryRun": a.dry_run,
        "options": options,
    }
    if a.subresource:
        req["subResource"] = a.subresource
        req["requestSubResource"] = a.subresource
    if a.namespace:
        req["namespace"] = a.namespace
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": req}


@dataclass
class Verdict:
    """A webhook's checked answer."""

    allowed: bool
    status: Obj | None = None
    patch: str = ""
    patch_type: str = ""
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    #: the object the webhook was sent (what its patch applies to)
    sent: Obj | None = None


class BadResponse(Exception):
    """The answer is not an AdmissionReview for this request (upstream treats it as a failed call)."""


def verdict(answer: Any, uid: str, api_version: str = API_VERSION) -> Verdict:
    """Upstream's VerifyAdmissionResponse for a review of `api_version`."""
    if not isinstance(answer, dict):
        raise BadResponse("received invalid webhook response: expected an object")
    if answer.get("apiVersion") != api_version or answer.get("kind") != "AdmissionReview":
        raise BadResponse(f"expected webhook response of {api_version}, Kind=AdmissionReview, got "
                          f"{answer.get('apiVersion') or ''}, Kind={answer.get('kind') or ''}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise BadResponse("webhook response was absent")
    if response.get("uid") != uid:
        raise BadResponse(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    patch, patch_type = response.get("patch") or "", response.get("patchType") or ""
    if patch and patch_type != "JSONPatch":
        raise BadResponse(f'expected patchType "JSONPatch", got "{patch_type}"' if patch_type else
                          "webhook returned response.patch but not response.patchType")
    if patch_type and not patch:
        raise BadResponse("webhook returned response.patchType but not response.patch")
    status = response.get("status")
    warnings = [w for w in response.get("warnings") or [] if isinstance(w, str)]
    annotations = response.get("auditAnnotations") or {}
    return Verdict(bool(response.get("allowed")), status if isinstance(status, dict) else None, patch, patch_type,
                   warnings, {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict)
                   else {})


def denied(webhook: str, status: Obj | None) -> errors.StatusError:
    """Upstream's ToStatusErr: the webhook's Status, at least a 400 Failure, its message prefixed."""
    status = dict(status or {})
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    by = f'admission webhook "{webhook}" denied the request'
    message, reason = status.get("message") or "", status.get("reason") or ""
    if message:
        text = f"{by}: {message}"
    elif reason:
        text = f"{by}: {reason}"
    else:
        text = f"{by} without explanation"
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return errors.StatusError(code, str(reason), text, details)


def call_failed(webhook: str, why: str) -> errors.StatusError:
    """Upstream's InternalError around ErrCallingWebhook, for a failurePolicy Fail webhook."""
    text = f'failed calling webhook "{webhook}": {why}'
    return errors.StatusError(500, "InternalError", f"Internal error occurred: {text}", {"causes": [{"message": text}]})


def no_dry_run(webhook: str) -> errors.StatusError:
    """A dry-run request that a webhook with side effects would see (upstream's NewDryRunUnsupportedErr)."""
    return errors.bad_request(f'admission webhook "{webhook}" does not support dry run')

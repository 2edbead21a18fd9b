"""The review APIs: TokenReview, SelfSubjectReview and the access reviews.

They store nothing: each POST answers with the object and its status filled in. With no
authorizer configured every request is allowed (upstream's AlwaysAllow mode), and the access
reviews say so rather than pretend to evaluate RBAC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apiserver.auth.tokens import DEFAULT_EXPIRATION, MIN_EXPIRATION, TokenIssuer
from services.api import errors

ANONYMOUS = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}


def bearer_token(authorization: str | None) -> str:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return ""


def user_info(tokens: TokenIssuer, authorization: str | None) -> dict[str, Any]:
    """Who the request is from, as far as the apiserver authenticates it (service-account tokens)."""
    token = bearer_token(authorization)
    if token:
        status = tokens.review(token, None)
        if status.get("authenticated"):
            return status["user"]
    return dict(ANONYMOUS)


def _review(body: Any, api_version: str, kind: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request(f"a {kind} object is required")
    out = {k: v for k, v in body.items() if k != "status"}
    out["apiVersion"] = api_version
    out["kind"] = kind
    out.setdefault("metadata", {})
    out["metadata"].setdefault("creationTimestamp", None)
    return out


def token_review(tokens: TokenIssuer, body: Any) -> dict[str, Any]:
    review = _review(body, "authentication.k8s.io/v1", "TokenReview")
    spec = review.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("TokenReview spec must be an object")
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise errors.invalid("TokenReview", "authentication.k8s.io", "", [errors.cause(
            "spec.token", "Required value: token must not be empty", "FieldValueRequired")])
    review["status"] = tokens.review(token, spec.get("audiences"))
    return review


def self_subject_review(tokens: TokenIssuer, body: Any, authorization: str | None) -> dict[str, Any]:
    review = _review(body or {"metadata": {}}, "authentication.k8s.io/v1", "SelfSubjectReview")
    review["status"] = {"userInfo": user_info(tokens, authorization)}
    return review


def access_review(kind: str, body: Any) -> dict[str, Any]:
    review = _review(body, "authorization.k8s.io/v1", kind)
    spec = review.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{kind} spec must be an object")
    if kind == "SelfSubjectRulesReview":
        review["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
        return review
    if not spec.get("resourceAttributes") and not spec.get("nonResourceAttributes"):
        raise errors.invalid(kind, "authorization.k8s.io", "", [errors.cause(
            "spec.resourceAttributes", "Invalid value: null: exactly one of nonResourceAttributes or "
            "resourceAttributes must be specified")])
    review["status"] = {"allowed": True, "reason": "no authorizer is configured: every request is allowed"}
    return review


def token_request(
    tokens: TokenIssuer, body: Any, namespace: str, account: dict[str, Any], bound: dict[str, Any] | None
) -> dict[str, Any]:
    """serviceaccounts/token: sign a token for `account`."""
    request = _review(body or {}, "authentication.k8s.io/v1", "TokenRequest")
    spec = request.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise errors.bad_request("TokenRequest spec must be an object")
    audiences = spec.get("audiences")
    if audiences is not None and (not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences)):
        raise errors.bad_request("TokenRequest spec.audiences must be a list of strings")
    seconds = spec.get("expirationSeconds") or DEFAULT_EXPIRATION
    if not isinstance(seconds, int) or seconds < MIN_EXPIRATION:
        raise errors.invalid("TokenRequest", "authentication.k8s.io", account["metadata"]["name"], [errors.cause(
            "spec.expirationSeconds", f"Invalid value: {seconds}: may not specify a duration less than 10 minutes")])
    spec["expirationSeconds"] = seconds
    spec.setdefault("audiences", tokens.audiences)
    token, exp = tokens.issue(namespace, account["metadata"]["name"], account["metadata"].get("uid", ""),
                              spec.get("audiences"), seconds, bound)
    request["metadata"].update({"name": account["metadata"]["name"], "namespace": namespace})
    request["status"] = {"token": token,
                         "expirationTimestamp": datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    return request

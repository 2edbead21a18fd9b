"""The review APIs: TokenReview, SelfSubjectReview and the access reviews.

They store nothing: each POST answers with the object and its status filled in, from the
apiserver's own authenticators and authorizers, as upstream's review endpoints do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apiserver.auth.authn import Authenticator
from apiserver.auth.authz import ALLOW, DENY, Attributes, Chain
from apiserver.auth.tokens import DEFAULT_EXPIRATION, MIN_EXPIRATION, TokenIssuer
from services.api import errors
from services.auth.identity import UserInfo

#: upstream's ValidateTokenRequest refuses longer tokens
MAX_EXPIRATION = 1 << 32

AUTHORIZATION_GROUP = "authorization.k8s.io"
REVIEW_KINDS = ("TokenReview", "SelfSubjectReview", "SubjectAccessReview", "LocalSubjectAccessReview",
                "SelfSubjectAccessReview", "SelfSubjectRulesReview")


def _review(body: Any, api_version: str, kind: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request(f"a {kind} object is required")
    out = {k: v for k, v in body.items() if k != "status"}
    out["apiVersion"] = api_version
    out["kind"] = kind
    if not isinstance(out.get("metadata"), dict):
        out["metadata"] = {}
    out["metadata"].setdefault("creationTimestamp", None)
    return out


def token_review(authenticator: Authenticator, body: Any) -> dict[str, Any]:
    review = _review(body, "authentication.k8s.io/v1", "TokenReview")
    spec = review.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("TokenReview spec must be an object")
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise errors.invalid("TokenReview", "authentication.k8s.io", "", [errors.cause(
            "spec.token", "Required value: token must not be empty", "FieldValueRequired")])
    review["status"] = authenticator.review(token, spec.get("audiences"))
    return review


def self_subject_review(body: Any, user: UserInfo) -> dict[str, Any]:
    review = _review(body or {"metadata": {}}, "authentication.k8s.io/v1", "SelfSubjectReview")
    review["status"] = {"userInfo": user.to_dict()}
    return review


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.bad_request(f"{where} must be a list of strings")
    return value


def _subject(kind: str, spec: dict[str, Any], requester: UserInfo) -> UserInfo:
    """Who the review asks about: the requester for the self reviews, the spec's user otherwise."""
    if kind.startswith("Self"):
        return requester
    extra = spec.get("extra") or {}
    if not isinstance(extra, dict):
        raise errors.bad_request(f"{kind} spec.extra must be an object")
    return UserInfo(str(spec.get("user") or ""), str(spec.get("uid") or ""),
                    tuple(_strings(spec.get("groups"), f"{kind} spec.groups")),
                    {str(k): _strings(v, f"{kind} spec.extra") for k, v in extra.items()})


def _attributes(kind: str, spec: dict[str, Any], user: UserInfo) -> Attributes:
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    causes = []
    if resource is not None and non_resource is not None:
        causes.append(errors.cause("spec.nonResourceAttributes", "Invalid value: \"object\": cannot be specified "
                                   "in combination with resourceAttributes"))
    if not resource and not non_resource:
        causes.append(errors.cause("spec.resourceAttributes", "Invalid value: null: exactly one of "
                                   "nonResourceAttributes or resourceAttributes must be specified"))
    if not kind.startswith("Self") and not user.name and not user.groups:
        causes.append(errors.cause("spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    if causes:
        raise errors.invalid(kind, AUTHORIZATION_GROUP, "", causes)
    if resource:
        if not isinstance(resource, dict):
            raise errors.bad_request(f"{kind} spec.resourceAttributes must be an object")
        return Attributes(user, str(resource.get("verb") or ""), True, namespace=str(resource.get("namespace") or ""),
                          api_group=str(resource.get("group") or ""), api_version=str(resource.get("version") or ""),
                          resource=str(resource.get("resource") or ""),
                          subresource=str(resource.get("subresource") or ""), name=str(resource.get("name") or ""))
    if not isinstance(non_resource, dict):
        raise errors.bad_request(f"{kind} spec.nonResourceAttributes must be an object")
    return Attributes(user, str(non_resource.get("verb") or ""), False, str(non_resource.get("path") or ""))


def access_review(
    kind: str, body: Any, requester: UserInfo, authorizer: Chain, namespace: str | None
) -> dict[str, Any]:
    """SubjectAccessReview and its local, self and rules variants, answered by the configured authorizers."""
    review = _review(body, f"{AUTHORIZATION_GROUP}/v1", kind)
    spec = review.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{kind} spec must be an object")
    if kind == "SelfSubjectRulesReview":
        rules_namespace = spec.get("namespace")
        if not rules_namespace or not isinstance(rules_namespace, str):
            raise errors.bad_request("no namespace on request")
        resource, non_resource, incomplete, problem = authorizer.rules_for(requester, rules_namespace)
        review["status"] = {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": incomplete}
        if problem:
            review["status"]["evaluationError"] = problem
        return review
    if kind == "LocalSubjectAccessReview":
        attributes = spec.get("resourceAttributes")
        if isinstance(attributes, dict):
            if attributes.get("namespace") and attributes["namespace"] != namespace:
                raise errors.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
            attributes["namespace"] = namespace
        review["metadata"]["namespace"] = namespace
    attrs = _attributes(kind, spec, _subject(kind, spec, requester))
    decision, reason = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": decision == ALLOW}
    if decision == DENY:
        status["denied"] = True
    if reason:
        status["reason"] = reason
    review["status"] = status
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
    seconds = spec.get("expirationSeconds")
    if seconds is None:
        seconds = DEFAULT_EXPIRATION
    if seconds < MIN_EXPIRATION or seconds > MAX_EXPIRATION:
        limit = "less than 10 minutes" if seconds < MIN_EXPIRATION else "larger than 2^32 seconds"
        raise errors.invalid("TokenRequest", "authentication.k8s.io", account["metadata"]["name"], [errors.cause(
            "spec.expirationSeconds", f"Invalid value: {seconds}: may not specify a duration {limit}")])
    spec["expirationSeconds"] = seconds
    spec.setdefault("audiences", tokens.audiences)
    token, exp = tokens.issue(namespace, account["metadata"]["name"], account["metadata"].get("uid", ""),
                              spec.get("audiences"), seconds, bound)
    request["metadata"].update({"name": account["metadata"]["name"], "namespace": namespace})
    request["status"] = {"token": token,
                         "expirationTimestamp": datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    return request

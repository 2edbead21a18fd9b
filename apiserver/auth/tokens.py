"""Service-account tokens: the TokenRequest API signs them, TokenReview and every request check them.

Tokens are JWTs (ES256) with upstream's claims (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf` and the
`kubernetes.io` claim naming the namespace, service account and bound object), so anything that
reads a projected token the upstream way can read ours. Legacy Secret-based tokens (issuer
`kubernetes/serviceaccount`, flat `kubernetes.io/serviceaccount/*` claims) verify with the same keys.
A valid signature is not enough: the service account, and the Pod, Secret or Node a token is bound
to, must still exist with the UID the token names, as upstream's validators check.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.runtime.pki import load_or_create_service_account_key

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 2**32
#: A bound object being deleted keeps its tokens valid this long, as upstream's graceful window.
DELETION_GRACE = 60.0
_LEGACY = "kubernetes.io/serviceaccount/"

log = structlog.get_logger("tokens")

#: (plural, namespace, name) -> the live object from the watch cache, or None when it does not exist.
Lookup = Callable[[str, str, str], dict[str, Any] | None]


class TokenError(Exception):
    """Why a token does not authenticate, worded as upstream's authenticator words it."""


@dataclass(frozen=True, slots=True)
class Claims:
    """What a verified token asserts: who it is for and what it is bound to."""

    namespace: str
    name: str
    uid: str
    audiences: tuple[str, ...]
    #: (kind, name, uid) of each bound object, kind one of "pod", "secret", "node".
    bound: tuple[tuple[str, str, str], ...]
    jti: str = ""
    legacy: bool = False
    #: Unix seconds after which the token is refused (`exp`), even from a cache; 0 for legacy tokens.
    expires: float = 0.0

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def user(self) -> dict[str, Any]:
        """TokenReview's `status.user`."""
        extra: dict[str, list[str]] = {}
        for kind, name, uid in self.bound:
            if kind in ("pod", "node"):
                extra[f"authentication.kubernetes.io/{kind}-name"] = [name]
                extra[f"authentication.kubernetes.io/{kind}-uid"] = [uid]
        if self.jti:
            extra["authentication.kubernetes.io/credential-id"] = [f"JTI={self.jti}"]
        user: dict[str, Any] = {
            "username": self.username,
            "uid": self.uid,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}", "system:authenticated"],
        }
        if extra:
            user["extra"] = extra
        return user


def _load_public(path: str) -> ec.EllipticCurvePublicKey:
    """A verification key: a PEM public key, or the public half of a PEM private key (as upstream accepts)."""
    data = Path(path).read_bytes()
    try:
        key: Any = serialization.load_pem_public_key(data)
    except ValueError:
        key = serialization.load_pem_private_key(data, password=None).public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError(f"{path}: service-account key must be an EC key")
    return key


def _deleted_long_ago(obj: dict[str, Any], now: float) -> bool:
    stamp = (obj.get("metadata") or {}).get("deletionTimestamp")
    if not stamp:
        return False
    try:
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return True
    return when < now - DELETION_GRACE


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class TokenIssuer:
    """Signs service-account tokens with one private key and verifies them with any of its public keys."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, issuer: str, audiences: list[str],
                 verify_keys: Sequence[ec.EllipticCurvePublicKey] = ()) -> None:
        self.key = key
        self.verify_keys = list(verify_keys) or [key.public_key()]
        self.issuer = issuer
        self.audiences = audiences or [issuer]

    @classmethod
    def load(cls, signing_key_file: str, key_files: Sequence[str], cert_dir: str, issuer: str,
             audiences: list[str]) -> TokenIssuer:
        """The keys the flags name. Without --service-account-signing-key-file the key is kept in
        `cert_dir` when one is given (created on first start); with neither, a key of this process only."""
        if signing_key_file:
            key = serialization.load_pem_private_key(Path(signing_key_file).read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{signing_key_file}: service-account signing key must be an EC key")
        elif cert_dir:
            key = load_or_create_service_account_key(Path(cert_dir) / "sa.key", Path(cert_dir) / "sa.pub")
        else:
            log.warning("no --service-account-signing-key-file: tokens this apiserver signs verify only here, "
                        "and only until it restarts")
            key = ec.generate_private_key(ec.SECP256R1())
        return cls(key, issuer or DEFAULT_ISSUER, audiences, [_load_public(f) for f in key_files])

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        audiences: list[str] | None,
        expiration_seconds: int,
        bound: dict[str, Any] | None = None,
    ) -> tuple[str, int]:
        """A token and its expiry (unix seconds)."""
        now = int(time.time())
        exp = now + expiration_seconds
        claim: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}
        if bound and bound.get("kind") in ("Pod", "Secret", "Node"):
            claim[bound["kind"].lower()] = {"name": bound.get("name", ""), "uid": bound.get("uid", "")}
            if bound["kind"] == "Pod" and bound.get("node"):
                claim["node"] = {"name": bound["node"]["name"], "uid": bound["node"]["uid"]}
        payload = {
            "iss": self.issuer,
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "aud": audiences or self.audiences,
            "exp": exp,
            "iat": now,
            "nbf": now,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": claim,
        }
        return jwt.encode(payload, self.key, algorithm="ES256"), exp

    def verify(self, token: str) -> Claims:
        """The claims of a token one of the keys signed, for this issuer or the legacy one."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise TokenError(f"invalid bearer token, {exc}") from None
        legacy = unverified.get("iss") == LEGACY_ISSUER
        issuer = LEGACY_ISSUER if legacy else self.issuer
        failure: jwt.PyJWTError | None = None
        for key in self.verify_keys:
            try:
                claims = jwt.decode(token, key, algorithms=["ES256"], issuer=issuer, options={"verify_aud": False})
                break
            except jwt.InvalidSignatureError as exc:
                failure = exc
            except jwt.PyJWTError as exc:
                raise TokenError(f"invalid bearer token, {exc}") from None
        else:
            raise TokenError(f"invalid bearer token, {failure}")
        if legacy:
            return Claims(claims.get(_LEGACY + "namespace", ""), claims.get(_LEGACY + "service-account.name", ""),
                          claims.get(_LEGACY + "service-account.uid", ""), tuple(self.audiences),
                          (("secret", claims.get(_LEGACY + "secret.name", ""), ""),), legacy=True)
        k8s = claims.get("kubernetes.io") or {}
        sa = k8s.get("serviceaccount") or {}
        aud = claims.get("aud") or []
        bound = tuple((kind, str(ref.get("name", "")), str(ref.get("uid", "")))
                      for kind in ("pod", "secret", "node") if isinstance(ref := k8s.get(kind), dict))
        return Claims(k8s.get("namespace", ""), sa.get("name", ""), sa.get("uid", ""),
                      tuple([aud] if isinstance(aud, str) else aud), bound, str(claims.get("jti") or ""),
                      expires=float(claims.get("exp") or 0))

    def review(self, token: str, audiences: list[str] | None, lookup: Lookup | None) -> dict[str, Any]:
        """TokenReview status for `token`: signature, audiences, then the live objects it names."""
        try:
            claims = self.verify(token)
            matched = matching_audiences(claims, audiences or self.audiences)
            if lookup is not None:
                check_live(claims, token, lookup)
        except TokenError as exc:
            return {"authenticated": False, "error": str(exc)}
        return {"authenticated": True, "user": claims.user(), "audiences": matched}


def matching_audiences(claims: Claims, wanted: list[str]) -> list[str]:
    matched = [a for a in wanted if a in claims.audiences]
    if not matched:
        raise TokenError("token audiences " + str(list(claims.audiences)) + " is invalid for the target audiences " +
                         str(wanted))
    return matched


def check_live(claims: Claims, token: str, lookup: Lookup, now: float | None = None) -> None:
    """Raise TokenError unless the account and every bound object still exist with the claimed UIDs."""
    now = time.time() if now is None else now
    if claims.legacy:
        _check_legacy(claims, token, lookup)
        return
    account = lookup("serviceaccounts", claims.namespace, claims.name)
    if account is None:
        raise TokenError(f'serviceaccounts "{claims.name}" not found')
    if _deleted_long_ago(account, now):
        raise TokenError(f"service account {claims.namespace}/{claims.name} has been deleted")
    if _uid(account) != claims.uid:
        raise TokenError(f"service account UID ({_uid(account)}) does not match claim ({claims.uid})")
    pod_bound = any(kind == "pod" for kind, _, _ in claims.bound)
    for kind, name, uid in claims.bound:
        if kind == "node" and pod_bound:
            continue  # a pod's token names its node for information; the pod is what it is bound to
        plural = {"pod": "pods", "secret": "secrets", "node": "nodes"}[kind]
        obj = lookup(plural, "" if kind == "node" else claims.namespace, name)
        if obj is None or _deleted_long_ago(obj, now):
            raise TokenError("service account token has been invalidated")
        if _uid(obj) != uid:
            raise TokenError(f"{kind} UID ({_uid(obj)}) does not match service account {kind} ref claim ({uid})")


def _check_legacy(claims: Claims, token: str, lookup: Lookup) -> None:
    """A legacy token lives as long as its Secret holds it and its service account is the one it names."""
    secret_name = claims.bound[0][1]
    secret = lookup("secrets", claims.namespace, secret_name)
    if secret is None or (secret.get("metadata") or {}).get("deletionTimestamp"):
        raise TokenError("token has been invalidated")
    try:
        held = base64.b64decode((secret.get("data") or {}).get("token", ""), validate=True)
    except ValueError:
        held = b""
    if held != token.encode():
        raise TokenError("token does not match server's copy")
    account = lookup("serviceaccounts", claims.namespace, claims.name)
    if account is None:
        raise TokenError(f'serviceaccounts "{claims.name}" not found')
    if (account.get("metadata") or {}).get("deletionTimestamp"):
        raise TokenError(f"ServiceAccount {claims.namespace}/{claims.name} has been deleted")
    if _uid(account) != claims.uid:
        raise TokenError(f"ServiceAccount UID ({_uid(account)}) does not match claim ({claims.uid})")

"""Service-account tokens: the TokenRequest API signs them, TokenReview checks them.

Tokens are JWTs (ES256) with upstream's claims (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf` and the
`kubernetes.io` claim naming the namespace, service account and bound object), so anything that
reads a projected token the upstream way can read ours.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.runtime.pki import write_file

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 2**32


class TokenIssuer:
    """Signs and verifies service-account tokens with one key pair."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, issuer: str, audiences: list[str]) -> None:
        self.key = key
        self.public = key.public_key()
        self.issuer = issuer
        self.audiences = audiences or [issuer]

    @classmethod
    def load_or_create(cls, key_file: str, cert_dir: Path, issuer: str, audiences: list[str]) -> TokenIssuer:
        """The key in `key_file`, or one kept in `cert_dir` (created on first start)."""
        path = Path(key_file) if key_file else cert_dir / "sa.key"
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{path}: service-account signing key must be an EC key")
        else:
            key = ec.generate_private_key(ec.SECP256R1())
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()), 0o600)
        return cls(key, issuer or DEFAULT_ISSUER, audiences)

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

    def review(self, token: str, audiences: list[str] | None) -> dict[str, Any]:
        """TokenReview status for `token`."""
        wanted = audiences or self.audiences
        try:
            claims = jwt.decode(token, self.public, algorithms=["ES256"], issuer=self.issuer,
                                options={"verify_aud": False})
        except jwt.PyJWTError as exc:
            return {"authenticated": False, "error": f"invalid bearer token, {exc}"}
        token_aud = claims.get("aud") or []
        if isinstance(token_aud, str):
            token_aud = [token_aud]
        matched = [a for a in wanted if a in token_aud]
        if not matched:
            return {"authenticated": False, "error": "token audiences " + str(token_aud) +
                    " is invalid for the target audiences " + str(wanted)}
        k8s = claims.get("kubernetes.io") or {}
        sa = k8s.get("serviceaccount") or {}
        namespace = k8s.get("namespace", "")
        extra: dict[str, list[str]] = {}
        pod = k8s.get("pod")
        if pod:
            extra["authentication.kubernetes.io/pod-name"] = [pod.get("name", "")]
            extra["authentication.kubernetes.io/pod-uid"] = [pod.get("uid", "")]
        if claims.get("jti"):
            extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
        user: dict[str, Any] = {
            "username": claims.get("sub", ""),
            "uid": sa.get("uid", ""),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        }
        if extra:
            user["extra"] = extra
        return {"authenticated": True, "user": user, "audiences": matched}

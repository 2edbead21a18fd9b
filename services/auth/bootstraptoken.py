"""Bootstrap tokens as kubeadm and upstream's bootstrap API define them: `<id>.<secret>` stored in
kube-system Secrets of type `bootstrap.kubernetes.io/token` named `bootstrap-token-<id>`, and the
detached JWS (HS256) that signs the cluster-info ConfigMap with a token's secret.

The apiserver's authenticator, the bootstrapsigner and tokencleaner controllers and `pyk8s token`
all read tokens through this module, so the rules exist once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import orjson

SECRET_TYPE = "bootstrap.kubernetes.io/token"
NAMESPACE = "kube-system"
SECRET_PREFIX = "bootstrap-token-"
TOKEN_ID = "token-id"
TOKEN_SECRET = "token-secret"
EXPIRATION = "expiration"
DESCRIPTION = "description"
EXTRA_GROUPS = "auth-extra-groups"
USAGE_PREFIX = "usage-bootstrap-"
USAGES = ("authentication", "signing")
USER_PREFIX = "system:bootstrap:"
GROUP = "system:bootstrappers"
#: the cluster-info ConfigMap the bootstrap signer signs, in kube-public
CLUSTER_INFO = "cluster-info"
CLUSTER_INFO_NAMESPACE = "kube-public"
KUBECONFIG_KEY = "kubeconfig"
JWS_PREFIX = "jws-kubeconfig-"

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
ID_RE = re.compile(r"^[a-z0-9]{6}$")
SECRET_RE = re.compile(r"^[a-z0-9]{16}$")
GROUP_RE = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def generate_token() -> str:
    """A fresh `<6>.<16>` token from the token alphabet, as kubeadm's GenerateBootstrapToken."""
    pick = "".join(secrets.choice(_ALPHABET) for _ in range(22))
    return f"{pick[:6]}.{pick[6:]}"


def secret_name(token_id: str) -> str:
    return SECRET_PREFIX + token_id


def secret_data(secret: dict[str, Any], key: str) -> str:
    """One field of a token Secret (`data` is base64, `stringData` never reaches storage)."""
    value = (secret.get("data") or {}).get(key)
    if not isinstance(value, str):
        return ""
    try:
        return base64.b64decode(value).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 expiration; None when unparseable (upstream then treats the token as expired)."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def expired(secret: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether the token's expiration has passed (or is unreadable); no expiration never expires."""
    text = secret_data(secret, EXPIRATION)
    if not text:
        return False
    when = parse_time(text)
    return when is None or when <= (now or datetime.now(UTC))


def expires_at(secret: dict[str, Any]) -> datetime | None:
    text = secret_data(secret, EXPIRATION)
    return parse_time(text) if text else None


def extra_groups(secret: dict[str, Any]) -> list[str] | None:
    """The auth-extra-groups, or None when one of them is not a `system:bootstrappers:` group."""
    groups = [g.strip() for g in secret_data(secret, EXTRA_GROUPS).split(",") if g.strip()]
    if any(not GROUP_RE.match(g) for g in groups):
        return None
    return groups


def usable_for(secret: dict[str, Any], usage: str) -> bool:
    return secret_data(secret, USAGE_PREFIX + usage) == "true"


def token_secret(secret: dict[str, Any]) -> tuple[str, str] | None:
    """(token-id, token-secret) of a well-formed token Secret whose name matches its id, else None."""
    if secret.get("type") != SECRET_TYPE:
        return None
    token_id, value = secret_data(secret, TOKEN_ID), secret_data(secret, TOKEN_SECRET)
    name = (secret.get("metadata") or {}).get("name", "")
    if not ID_RE.match(token_id) or not SECRET_RE.match(value) or name != secret_name(token_id):
        return None
    return token_id, value


def matches(secret: dict[str, Any], presented: str) -> bool:
    """Constant-time comparison of a presented token-secret with the stored one."""
    parts = token_secret(secret)
    return parts is not None and hmac.compare_digest(parts[1].encode(), presented.encode())


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def detached_jws(content: str, token_id: str, token_value: str) -> str:
    """`header..signature`: an HS256 JWS of `content` keyed by the token secret, payload left out, as
    upstream's bootstrap signer computes it."""
    header = _b64url(orjson.dumps({"alg": "HS256", "kid": token_id}))
    signing_input = f"{header}.{_b64url(content.encode())}".encode()
    signature = hmac.new(token_value.encode(), signing_input, hashlib.sha256).digest()
    return f"{header}..{_b64url(signature)}"

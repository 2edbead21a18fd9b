"""Bootstrap tokens: the authenticator's rules (expiry, usages, groups, secret match), the detached JWS
checked with pyjwt, and `pyk8s token`'s Secret and table."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import jwt
import pytest

from apiserver.auth.bootstraptoken import BootstrapTokenAuthenticator
from apiserver.storage.cache import Entry
from deploy import tokens
from services.auth import bootstraptoken as bt
from services.runtime.durations import short_human_duration

ROOT = "/registry/"


def secret(token: str = "abcdef.0123456789abcdef", **fields: str) -> dict[str, Any]:
    body = tokens.token_secret(token, 3600, "", ["system:bootstrappers:extra"], ["authentication", "signing"])
    for key, value in fields.items():
        if value is None:
            body["data"].pop(key, None)
        else:
            body["data"][key] = base64.b64encode(value.encode()).decode()
    body["metadata"]["uid"] = "u1"
    return body


def authenticator(*secrets: dict[str, Any]) -> BootstrapTokenAuthenticator:
    entries = {f"{ROOT}secrets/kube-system/{s['metadata']['name']}": Entry(s, 1) for s in secrets}
    return BootstrapTokenAuthenticator(lambda: SimpleNamespace(entries=entries), ROOT)  # type: ignore[arg-type, return-value]


def test_a_valid_token_is_its_bootstrap_user_in_its_groups() -> None:
    user = authenticator(secret()).authenticate("abcdef.0123456789abcdef")
    assert user is not None and user.name == "system:bootstrap:abcdef"
    assert user.groups == ("system:bootstrappers", "system:bootstrappers:extra", "system:authenticated")


@pytest.mark.parametrize(("token", "fields"), [
    ("abcdef.0123456789abcdee", {}),
    ("abcdef.0123456789abcdef", {"expiration": "2020-01-01T00:00:00Z"}),
    ("abcdef.0123456789abcdef", {"expiration": "not a time"}),
    ("abcdef.0123456789abcdef", {"usage-bootstrap-authentication": None}),
    ("abcdef.0123456789abcdef", {"auth-extra-groups": "system:masters"}),
    ("abcdef.0123456789abcdef", {"token-id": "zzzzzz"}),
    ("ABCDEF.0123456789abcdef", {}),
])
def test_tokens_that_do_not_authenticate(token: str, fields: dict[str, str]) -> None:
    assert authenticator(secret(**fields)).authenticate(token) is None


def test_a_secret_of_another_type_does_not_authenticate() -> None:
    body = secret()
    body["type"] = "Opaque"
    assert authenticator(body).authenticate("abcdef.0123456789abcdef") is None


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_detached_jws_verifies_with_the_token_secret() -> None:
    content = "apiVersion: v1\nkind: Config\n"
    header, empty, signature = bt.detached_jws(content, "abcdef", "0123456789abcdef").split(".")
    assert empty == ""
    payload = base64.urlsafe_b64encode(content.encode()).decode().rstrip("=")
    full = f"{header}.{payload}.{signature}"
    assert jwt.get_unverified_header(full) == {"alg": "HS256", "kid": "abcdef"}
    assert jwt.api_jws.decode(full, "0123456789abcdef", algorithms=["HS256"]) == content.encode()


def test_token_secret_as_kubeadm_writes_it() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    body = tokens.token_secret("abcdef.0123456789abcdef", 7200, "node c", list(tokens.DEFAULT_GROUPS),
                               list(tokens.DEFAULT_USAGES), now)
    data = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
    assert body["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert body["type"] == "bootstrap.kubernetes.io/token"
    assert data == {"token-id": "abcdef", "token-secret": "0123456789abcdef", "description": "node c",
                    "expiration": "2026-01-01T02:00:00Z", "usage-bootstrap-signing": "true",
                    "usage-bootstrap-authentication": "true",
                    "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}
    with pytest.raises(tokens.TokenError):
        tokens.token_secret("abcdef.0123456789abcdef", 0, "", ["system:masters"], ["signing"])
    with pytest.raises(tokens.TokenError):
        tokens.token_secret("abcdef", 0, "", [], ["signing"])


def test_token_table_lines_up_like_tabwriter() -> None:
    now = datetime.now(UTC)
    rows = [tokens._row(secret(), now), tokens._row(secret("zyxwvu.0123456789abcdef", expiration=None), now)]
    lines = tokens.format_table([r for r in rows if r is not None]).splitlines()
    assert lines[0].startswith("TOKEN".ljust(26) + "TTL")
    assert lines[2].split()[1:3] == ["<forever>", "<never>"]
    assert lines[0].index("TTL") == lines[1].index(lines[1].split()[1]) == len("abcdef.0123456789abcdef") + 3


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (59, "59s"), (600, "10m"), (3600, "1h"), (86399, "23h"), (86400, "1d"),
    (timedelta(days=400).total_seconds(), "1y"),
])
def test_short_human_duration(seconds: float, text: str) -> None:
    assert short_human_duration(seconds) == text

"""`pyk8s token create/list/delete`: bootstrap tokens as kubeadm manages them, through the cluster's admin
kubeconfig, with kubeadm's defaults and output (a joining machine authenticates with one and finds
its signature on the cluster-info ConfigMap).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deploy.clusterinfo import SECRETS
from services.auth import bootstraptoken as bt
from services.client import Client, NotFound, load_kubeconfig
from services.runtime.durations import short_human_duration

DEFAULT_GROUPS = ("system:bootstrappers:kubeadm:default-node-token",)
DEFAULT_USAGES = ("signing", "authentication")
HEADER = ("TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS")


class TokenError(Exception):
    """A usage error or a refusal of the cluster, said as kubeadm says it."""


def token_secret(token: str, ttl: float, description: str, groups: list[str], usages: list[str],
                 now: datetime | None = None) -> dict:
    """The kube-system Secret kubeadm's `token create` writes for `token`."""
    match = bt.TOKEN_RE.match(token)
    if match is None:
        raise TokenError(f'the bootstrap token "{token}" was not of the form "{bt.TOKEN_RE.pattern}"')
    for group in groups:
        if not bt.GROUP_RE.match(group):
            raise TokenError(f'group "{group}" must match {bt.GROUP_RE.pattern}')
    for usage in usages:
        if usage not in bt.USAGES:
            raise TokenError(f'unknown usage "{usage}", valid values: {", ".join(bt.USAGES)}')
    token_id, value = match.groups()
    data = {bt.TOKEN_ID: token_id, bt.TOKEN_SECRET: value}
    if description:
        data[bt.DESCRIPTION] = description
    if ttl > 0:
        expires = (now or datetime.now(UTC)) + timedelta(seconds=ttl)
        data[bt.EXPIRATION] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    for usage in usages:
        data[bt.USAGE_PREFIX + usage] = "true"
    if groups:
        data[bt.EXTRA_GROUPS] = ",".join(groups)
    return {
        "apiVersion": "v1", "kind": "Secret", "type": bt.SECRET_TYPE,
        "metadata": {"name": bt.secret_name(token_id), "namespace": bt.NAMESPACE},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _client(kubeconfig: Path) -> Client:
    return Client(load_kubeconfig(str(kubeconfig)))


async def create(kubeconfig: Path, ttl: float, description: str, groups: list[str], usages: list[str],
                 token: str = "") -> str:
    """Store a new token (a random one unless given) and answer it, as `kubeadm token create` prints it."""
    token = token or bt.generate_token()
    body = token_secret(token, ttl, description, groups, usages)
    async with _client(kubeconfig) as client:
        await client.create(SECRETS, body, bt.NAMESPACE)
    return token


def _row(secret: dict, now: datetime) -> tuple[str, ...] | None:
    parts = bt.token_secret(secret)
    if parts is None:
        return None
    expires = bt.expires_at(secret)
    ttl, when = "<forever>", "<never>"
    if expires is not None:
        ttl, when = short_human_duration((expires - now).total_seconds()), expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    usages = ",".join(u for u in sorted(bt.USAGES) if bt.usable_for(secret, u)) or "<none>"
    description = bt.secret_data(secret, bt.DESCRIPTION) or "<none>"
    groups = bt.secret_data(secret, bt.EXTRA_GROUPS) or "<none>"
    return (f"{parts[0]}.{parts[1]}", f"{ttl:<9}", when, f"{usages:<22}", f"{description:<56}", groups)


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Go's tabwriter as kubeadm sets it up (minimum width 10, padding 3); the last column unpadded."""
    table = [HEADER, *rows]
    widths = [max(10, max(len(r[i]) for r in table) + 3) for i in range(len(HEADER) - 1)]
    return "\n".join("".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + r[-1] for r in table)


async def list_tokens(kubeconfig: Path, now: datetime | None = None) -> str:
    async with _client(kubeconfig) as client:
        answer = await client.list(SECRETS, bt.NAMESPACE, field_selector=f"type={bt.SECRET_TYPE}")
    now = now or datetime.now(UTC)
    rows = [row for secret in answer.get("items") or [] if (row := _row(secret, now)) is not None]
    return format_table(rows)


async def delete(kubeconfig: Path, tokens: list[str]) -> list[str]:
    """Delete tokens named by id or whole token; kubeadm's `bootstrap token "<id>" deleted` for each."""
    out = []
    async with _client(kubeconfig) as client:
        for given in tokens:
            token_id = given.split(".", 1)[0]
            if not bt.ID_RE.match(token_id):
                raise TokenError(f'given token didn\'t match pattern "{bt.ID_RE.pattern}" or '
                                 f'"{bt.TOKEN_RE.pattern}"')
            try:
                await client.delete(SECRETS, bt.secret_name(token_id), bt.NAMESPACE)
            except NotFound:
                raise TokenError(f'bootstrap token "{token_id}" not found') from None
            out.append(f'bootstrap token "{token_id}" deleted')
    return out

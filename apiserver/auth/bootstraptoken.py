"""The bootstrap token authenticator (--enable-bootstrap-token-auth), as upstream's: a bearer token
`<id>.<secret>` names the kube-system Secret `bootstrap-token-<id>`; when its secret matches (compared
in constant time), it is meant for authentication and not expired, the user is `system:bootstrap:<id>`
in `system:bootstrappers` and its auth-extra-groups. Secrets are read from the watch cache, so a new
or deleted token takes effect as soon as the cache sees it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from apiserver.storage.cache import ResourceCache
from services.auth import bootstraptoken as bt
from services.auth.identity import UserInfo, with_authenticated

log = structlog.get_logger(__name__)


class BootstrapTokenAuthenticator:
    def __init__(self, secrets: Callable[[], ResourceCache | None], root: str) -> None:
        self.secrets = secrets
        self.root = root

    def authenticate(self, token: str) -> UserInfo | None:
        """The bootstrap user a token stands for, or None when it is no valid bootstrap token."""
        match = bt.TOKEN_RE.match(token)
        cache = self.secrets()
        if match is None or cache is None:
            return None
        token_id, presented = match.groups()
        entry = cache.entries.get(f"{self.root}secrets/{bt.NAMESPACE}/{bt.secret_name(token_id)}")
        if entry is None:
            return None
        secret = entry.obj
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            return None
        parts = bt.token_secret(secret)
        if parts is None or parts[0] != token_id or not bt.matches(secret, presented):
            return None
        if bt.expired(secret):
            log.info("rejected expired bootstrap token", token_id=token_id)
            return None
        if not bt.usable_for(secret, "authentication"):
            return None
        groups = bt.extra_groups(secret)
        if groups is None:
            return None
        return UserInfo(bt.USER_PREFIX + token_id, groups=with_authenticated([bt.GROUP, *groups]))

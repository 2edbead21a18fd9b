"""Where the apiserver is and how to talk to it: kubeconfig files, in-cluster service-account
config, or a plain server URL for tests and local tools.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path.home() / ".kube" / "config"
TOKEN_FILE_REFRESH_SECONDS = 60.0


class ConfigError(Exception):
    """The kubeconfig or in-cluster environment does not describe a usable connection."""


@dataclass
class ClientConfig:
    """Everything the REST client needs to reach one apiserver as one user."""

    server: str = "http://127.0.0.1:8080"
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: str | None = None
    key_data: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    namespace: str = "default"
    qps: float = 0.0
    burst: int = 0
    timeout: float = 30.0
    user_agent: str = "pyk8s"
    impersonate: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    #: a token its owner replaces as it rotates (a TokenRequest refreshed before expiry); beats the others
    token_source: TokenSource | None = None

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS settings for httpx: False only when verification was switched off on purpose."""
        if not self.server.startswith("https://"):
            return True
        if self.insecure_skip_tls_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file or self.ca_data:
            ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        else:
            ctx = ssl.create_default_context()
        if self.cert_file or self.cert_data:
            with (
                _materialized(self.cert_file, self.cert_data) as cert,
                _materialized(self.key_file, self.key_data) as key,
            ):
                ctx.load_cert_chain(cert, key)
        return ctx

    def auth(self) -> httpx.Auth | None:
        if self.token_source is not None:
            return self.token_source
        if self.token_file:
            return _TokenFileAuth(self.token_file, self.token)
        if self.token:
            return _BearerAuth(self.token)
        if self.username is not None and self.password is not None:
            return httpx.BasicAuth(self.username, self.password)
        return None

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": self.user_agent, "Accept": "application/json", **self.extra_headers}
        if self.impersonate:
            headers["Impersonate-User"] = self.impersonate
        return headers


@contextlib.contextmanager
def _materialized(path: str | None, data: str | None) -> Generator[str | None, None, None]:
    """ssl only loads client certificates from files, so inline data goes through a private temp file."""
    if path or not data:
        yield path
        return
    fd, tmp = tempfile.mkstemp(prefix="pyk8s-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(data)
        yield tmp
    finally:
        os.unlink(tmp)


class _BearerAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self._token = token

    def authorization(self) -> str:
        """The Authorization header value, for requests written without httpx."""
        return f"Bearer {self._token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self.authorization()
        yield request


class TokenSource(httpx.Auth):
    """A bearer token held in memory and replaced by whoever obtains the next one, for clients whose
    credentials are short-lived tokens requested at run time (client-go's DynamicControllerClientBuilder)."""

    def __init__(self, token: str = "") -> None:
        self.token = token

    def authorization(self) -> str:
        """The Authorization header value with the current token, for requests written without httpx."""
        return f"Bearer {self.token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self.authorization()
        yield request


class _TokenFileAuth(httpx.Auth):
    """Rereads the token file every minute, because projected service-account tokens rotate."""

    def __init__(self, path: str, fallback: str | None) -> None:
        self._path = path
        self._token = fallback or ""
        self._read_at = 0.0

    def authorization(self) -> str:
        """The Authorization header value with the current token, for requests written without httpx."""
        now = time.monotonic()
        if now - self._read_at > TOKEN_FILE_REFRESH_SECONDS:
            try:
                self._token = Path(self._path).read_text().strip()
            except OSError:
                if not self._token:
                    raise
            self._read_at = now
        return f"Bearer {self._token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self.authorization()
        yield request


def in_cluster_config(
    sa_dir: Path = SERVICE_ACCOUNT_DIR, environ: dict[str, str] | None = None
) -> ClientConfig:
    """The config a pod gets from its service account and the kubernetes Service's env vars."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST")
    port = env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT must be defined"
        )
    token_path = sa_dir / "token"
    if not token_path.exists():
        raise ConfigError(f"open {token_path}: no such file or directory")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ca_path = sa_dir / "ca.crt"
    ns_path = sa_dir / "namespace"
    return ClientConfig(
        server=f"https://{host}:{port}",
        token=token_path.read_text().strip(),
        token_file=str(token_path),
        ca_file=str(ca_path) if ca_path.exists() else None,
        namespace=ns_path.read_text().strip() if ns_path.exists() else "default",
    )


def kubeconfig_paths(explicit: str | None = None, environ: dict[str, str] | None = None) -> list[Path]:
    """An explicit path wins; else every entry of KUBECONFIG; else ~/.kube/config."""
    env = os.environ if environ is None else environ
    if explicit:
        return [Path(explicit).expanduser()]
    if env.get("KUBECONFIG"):
        return [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
    return [DEFAULT_KUBECONFIG]


def _named(entries: Any, what: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name"):
            out[entry["name"]] = dict(entry.get(what) or {})
    return out


def merge_kubeconfigs(paths: list[Path]) -> dict[str, Any]:
    """Merge files like kubectl: the first file to define a name or current-context wins.

    File paths inside each file are made absolute against that file's folder.
    """
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    found = False
    for path in paths:
        if not path.exists():
            continue
        found = True
        doc = yaml.safe_load(path.read_text()) or {}
        base = path.resolve().parent
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for name, entry in _named(doc.get(section), key).items():
                if name not in merged[section]:
                    merged[section][name] = _resolve_paths(entry, base)
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
    if not found:
        raise ConfigError(f"no kubeconfig found at {os.pathsep.join(str(p) for p in paths)}")
    return merged


_PATH_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


def _resolve_paths(entry: dict[str, Any], base: Path) -> dict[str, Any]:
    for name in _PATH_FIELDS:
        value = entry.get(name)
        if value and not os.path.isabs(os.path.expanduser(value)):
            entry[name] = str(base / value)
        elif value:
            entry[name] = os.path.expanduser(value)
    return entry


def _b64(value: str | None) -> str | None:
    return base64.b64decode(value).decode() if value else None


def config_from_kubeconfig(merged: dict[str, Any], context: str | None = None) -> ClientConfig:
    """Resolve one context of a merged kubeconfig to a ClientConfig."""
    name = context or merged.get("current-context")
    if not name:
        raise ConfigError("current-context is not set in kubeconfig and no context was given")
    ctx = merged["contexts"].get(name)
    if ctx is None:
        raise ConfigError(f'context "{name}" does not exist')
    cluster = merged["clusters"].get(ctx.get("cluster", ""))
    if cluster is None:
        raise ConfigError(f'cluster "{ctx.get("cluster", "")}" does not exist (context "{name}")')
    user = merged["users"].get(ctx.get("user", ""), {}) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise ConfigError(f'no server found for cluster "{ctx.get("cluster")}"')
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(f'user "{ctx.get("user")}": exec and auth-provider credentials are not supported')
    token_file = user.get("tokenFile")
    token = user.get("token")
    if token_file and not token:
        token = Path(token_file).read_text().strip()
    return ClientConfig(
        server=server.rstrip("/"),
        token=token,
        token_file=token_file,
        username=user.get("username"),
        password=user.get("password"),
        ca_file=cluster.get("certificate-authority"),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        cert_file=user.get("client-certificate"),
        cert_data=_b64(user.get("client-certificate-data")),
        key_file=user.get("client-key"),
        key_data=_b64(user.get("client-key-data")),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.get("tls-server-name"),
        namespace=ctx.get("namespace") or "default",
        impersonate=user.get("as"),
    )


def load_kubeconfig(
    path: str | None = None, context: str | None = None, environ: dict[str, str] | None = None
) -> ClientConfig:
    return config_from_kubeconfig(merge_kubeconfigs(kubeconfig_paths(path, environ)), context)


def load_config(
    kubeconfig: str | None = None,
    context: str | None = None,
    master: str | None = None,
    environ: dict[str, str] | None = None,
) -> ClientConfig:
    """The order client-go's clientcmd uses: kubeconfig if one exists, else in-cluster, else --master alone.

    `master` overrides the kubeconfig's server, like kubectl's --server / components' --master.
    """
    env = os.environ if environ is None else environ
    paths = kubeconfig_paths(kubeconfig, env)
    if kubeconfig or any(p.exists() for p in paths):
        config = config_from_kubeconfig(merge_kubeconfigs(paths), context)
    elif env.get("KUBERNETES_SERVICE_HOST") and not master:
        config = in_cluster_config(environ=env)
    elif master:
        config = ClientConfig(server=master)
    else:
        raise ConfigError(
            "no kubeconfig, no in-cluster environment and no --master: cannot reach an apiserver"
        )
    if master:
        config.server = master.rstrip("/")
    return config

"""`python -m metrics_server`: upstream metrics-server's flags, scrape loop and API server."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ssl
import sys
import time
from pathlib import Path

import httpx
import structlog
import uvicorn

from metrics_server.api import MetricsAPI
from metrics_server.scraper import scrape
from metrics_server.storage import Storage
from services.auth.delegated import AccessReviewer, TokenWebhook
from services.auth.requestheader import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
)
from services.client import GVR, ApiError, Client, ClientConfig
from services.informers import Informer, SharedInformerFactory, strip_managed_fields
from services.runtime import base_parser, client_config, run, setup_logging
from services.runtime.durations import go_duration
from services.runtime.pki import ensure_self_signed, write_file

log = structlog.get_logger("metrics_server")

NODES = GVR("", "v1", "nodes")
PODS = GVR("", "v1", "pods")


def duration(text: str) -> float:
    try:
        seconds = go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f'must be positive, "{text}" given')
    return seconds


def parser() -> argparse.ArgumentParser:
    p = base_parser("metrics-server", "Serves metrics.k8s.io from the kubelets' resource metrics.",
                    default_secure_port=10250)
    p.add_argument("--cert-dir", default="apiserver.local.config/certificates",
                   help="where the self-signed serving certificate is kept when --tls-cert-file is not given")
    p.add_argument("--metric-resolution", type=duration, default=15.0,
                   help="how often kubelets are scraped (default 15s)")
    p.add_argument("--kubelet-insecure-tls", action="store_true",
                   help="do not verify the kubelets' serving certificates")
    p.add_argument("--kubelet-certificate-authority", default="", help="CA of the kubelets' serving certificates")
    p.add_argument("--kubelet-preferred-address-types", default="Hostname,InternalDNS,InternalIP,ExternalDNS,"
                                                                 "ExternalIP",
                   help="the node address types to scrape by, in order")
    p.add_argument("--kubelet-request-timeout", type=duration, default=10.0)
    return p


async def _authentication_config(client: Client) -> RequestHeaderConfig:
    """The front proxy's settings, as the apiserver publishes them; waited for, as upstream waits."""
    while True:
        try:
            cm = await client.get(GVR("", "v1", "configmaps"), CONFIGMAP_NAME, namespace=CONFIGMAP_NAMESPACE)
            return RequestHeaderConfig.from_configmap(cm.get("data") or {})
        except (ApiError, httpx.HTTPError, OSError) as exc:
            log.warning("waiting for the authentication configmap", error=str(exc))
            await asyncio.sleep(1)


def _kubelet_client(config: ClientConfig, args: argparse.Namespace) -> httpx.AsyncClient:
    """How kubelets are reached: this server's own credentials; their certs verified unless told not to."""
    tls = dataclasses.replace(config, server="https://kubelet", insecure_skip_tls_verify=args.kubelet_insecure_tls,
                              ca_file=args.kubelet_certificate_authority or None, ca_data=None)
    return httpx.AsyncClient(verify=tls.ssl_context(), auth=config.auth(),
                             timeout=httpx.Timeout(args.kubelet_request_timeout))


def _serving_files(args: argparse.Namespace, requestheader: RequestHeaderConfig) -> tuple[str, str, Path]:
    """The serving cert and key (self-signed in --cert-dir unless given) and the client CA bundle uvicorn
    verifies client certificates with (the front proxy's CA and the cluster's client CA)."""
    cert_dir = Path(args.cert_dir)
    cert_dir.mkdir(parents=True, exist_ok=True)
    cert, key = args.tls_cert_file, args.tls_private_key_file
    if not cert or not key:
        paths = ensure_self_signed(cert_dir, ["metrics-server.kube-system.svc", "localhost", "127.0.0.1"])
        cert, key = str(paths[0]), str(paths[1])
    bundle = cert_dir / "client-ca-bundle.crt"
    write_file(bundle, "\n".join(p for p in (requestheader.ca_pem, requestheader.client_ca_pem) if p).encode(),
               0o644)
    return cert, key, bundle


async def _scrape_loop(storage: Storage, nodes: Informer, http: httpx.AsyncClient, args: argparse.Namespace,
                       scraped: asyncio.Event) -> None:
    """Scrape every node each --metric-resolution, all at once; `scraped` is set after the first round."""
    address_types = [t for t in args.kubelet_preferred_address_types.split(",") if t]
    while True:
        started = time.monotonic()
        current = nodes.list()
        now = time.time()
        samples = await asyncio.gather(*(scrape(http, n, address_types, now) for n in current))
        for node, sample in zip(current, samples, strict=True):
            if sample is not None:
                storage.store(node["metadata"]["name"], sample)
        storage.forget({n["metadata"]["name"] for n in current})
        scraped.set()
        log.debug("scraped nodes", nodes=len(current), seconds=round(time.monotonic() - started, 3))
        await asyncio.sleep(max(args.metric_resolution - (time.monotonic() - started), 0.1))


async def main_async(args: argparse.Namespace) -> None:
    config = client_config(args, "metrics-server")
    client = Client(config)
    requestheader = await _authentication_config(client)
    cert, key, bundle = await asyncio.to_thread(_serving_files, args, requestheader)
    factory = SharedInformerFactory(client, transform=strip_managed_fields)
    nodes = factory.informer_for(NODES)
    pods = factory.informer_for(PODS)
    factory.start()
    storage = Storage()
    scraped = asyncio.Event()
    http = _kubelet_client(config, args)
    api = MetricsAPI(storage, nodes.list, pods.list, RequestHeaderAuthenticator(requestheader),
                     TokenWebhook(client), AccessReviewer(client), scraped.is_set)
    has_ca = bool(requestheader.ca_pem or requestheader.client_ca_pem)
    server = uvicorn.Server(uvicorn.Config(
        api, host=args.bind_address, port=args.secure_port, ssl_certfile=cert, ssl_keyfile=key,
        ssl_ca_certs=str(bundle) if has_ca else None, ssl_cert_reqs=ssl.CERT_OPTIONAL if has_ca else ssl.CERT_NONE,
        lifespan="off", log_level="warning", access_log=False, server_header=False))
    await factory.wait_for_cache_sync()
    loop_task = asyncio.create_task(_scrape_loop(storage, nodes, http, args, scraped))
    try:
        await server.serve()
    finally:
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        await http.aclose()
        await factory.shutdown()
        await client.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())

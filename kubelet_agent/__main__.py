"""`python -m kubelet_agent`: one kubelet on containerd, one hollow kubelet, or N hollow ones."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import structlog

from kubelet_agent.certificate.bootstrap import load_client_cert
from kubelet_agent.certificate.manager import client_manager, serving_manager
from kubelet_agent.certificate.store import SERVER_PREFIX, FileStore
from kubelet_agent.config import Settings, parser, settings
from kubelet_agent.cri.hollow import HollowRuntime
from kubelet_agent.hollow import HollowNodes
from kubelet_agent.kubelet import Kubelet, KubeletOptions
from kubelet_agent.node import HostInfo, NodeConfig
from kubelet_agent.server.auth import AccessWebhook, KubeletAuth, TokenWebhook
from kubelet_agent.server.server import KubeletServer
from services.client import Client
from services.runtime import HealthServer, client_config, run, setup_logging
from services.runtime.netns import Dialer

log = structlog.get_logger("kubelet")


def options(s: Settings) -> KubeletOptions:
    return KubeletOptions(root_dir=s.root_dir, cluster_dns=s.cluster_dns, cluster_domain=s.cluster_domain,
                          pod_manifest_path=s.pod_manifest_path, cni_conf_dir=s.cni_conf_dir,
                          node_netns=s.node_netns, resolv_conf=s.resolv_conf, hollow=s.hollow,
                          non_masquerade_cidr=s.non_masquerade_cidr,
                          max_parallel_pod_starts=s.max_parallel_pod_starts, eviction_hard=s.eviction_hard,
                          eviction_soft=s.eviction_soft, eviction_soft_grace_period=s.eviction_soft_grace_period,
                          eviction_minimum_reclaim=s.eviction_minimum_reclaim,
                          eviction_max_pod_grace_period=s.eviction_max_pod_grace_period,
                          eviction_pressure_transition=s.eviction_pressure_transition, housekeeping=s.housekeeping,
                          allow_privileged=s.allow_privileged,
                          allowed_unsafe_sysctls=list(s.allowed_unsafe_sysctls))


def node_config(s: Settings) -> NodeConfig:
    host = HostInfo.hollow() if s.hollow else HostInfo.detect(s.root_dir)
    return NodeConfig(name=s.hostname, node_ips=s.node_ips, host=host, runtime_version="", max_pods=s.max_pods,
                      labels=s.labels, taints=s.taints, reserved=s.reserved, pod_cidr=s.pod_cidr,
                      lease_duration=s.lease_duration, status_update=s.status_update, status_report=s.status_report)


UNSPECIFIED = ("0.0.0.0", "::")  # noqa: S104


def api_auth(s: Settings, client: Client, node: str) -> KubeletAuth:
    """The kubelet API's authentication and authorization the flags ask for, on node `node`."""
    return KubeletAuth(
        anonymous=s.anonymous_auth,
        tokens=TokenWebhook(client, s.token_webhook_ttl) if s.token_webhook else None,
        access=AccessWebhook(client, node, s.authorized_ttl, s.unauthorized_ttl)
        if s.authorization_mode == "Webhook" else None)


async def start_api(s: Settings, kubelet: Kubelet) -> KubeletServer:
    """The HTTPS API (logs, exec, port-forward, stats), listening where the apiserver dials the node.

    With --node-netns and no specific --address, the node's addresses live in that namespace, so the
    socket is bound there on the node IP; a specific --address is bound in the kubelet's own namespace.
    """
    auth = api_auth(s, kubelet.client, kubelet.name)
    api = KubeletServer(kubelet, address=s.address, port=s.port,
                        runtime_endpoint=None if s.hollow else s.endpoint, node_netns=s.node_netns or None,
                        cert_file=s.tls_cert_file or None, key_file=s.tls_key_file or None, cert_dir=s.cert_dir,
                        client_ca_file=s.client_ca_file or None, hosts=s.node_ips, auth=auth)
    sock = None
    if s.node_netns and s.address in UNSPECIFIED:
        dialer = Dialer(s.node_netns)
        try:
            sock = await dialer.listen(s.node_ips[0], s.port)
        finally:
            dialer.close()
    await api.start(sock=sock)
    kubelet.node_config.kubelet_port = api.port
    return api


def rotate_client_certificate(s: Settings, client: Client) -> asyncio.Task[None] | None:
    """With --rotate-certificates, renew the client certificate kept in --cert-dir when the kubeconfig uses it."""
    if not s.rotate_certificates:
        return None
    store = FileStore(Path(s.cert_dir))
    uses_store = client.config.cert_file and Path(client.config.cert_file).absolute() == store.current.absolute()
    if not uses_store or store.load() is None:
        log.info("not rotating: the kubeconfig's client certificate is not the one in --cert-dir",
                 node=s.hostname, cert_dir=s.cert_dir)
        return None
    return asyncio.create_task(client_manager(client, store, s.hostname).run())


def rotate_serving_certificate(s: Settings, client: Client, api: KubeletServer) -> asyncio.Task[None] | None:
    """With --rotate-server-certificates, the kubelet API serves a certificate of the kubelet-serving signer
    from --cert-dir as soon as one is issued (its self-signed one until then), renewed before it expires."""
    if not s.rotate_server_certificates:
        return None
    store = FileStore(Path(s.cert_dir), SERVER_PREFIX)

    def serve_current() -> None:
        api.use_certificate(store.current, store.current)

    if store.load() is not None:
        serve_current()
    return asyncio.create_task(serving_manager(client, store, s.hostname, s.node_ips, serve_current).run())


async def main(argv: list[str]) -> None:
    p = parser()
    args = p.parse_args(argv)
    setup_logging(args)
    try:
        s = settings(args)
    except ValueError as exc:
        p.error(str(exc))
    if s.bootstrap_kubeconfig:
        if not args.kubeconfig:
            p.error("--bootstrap-kubeconfig needs --kubeconfig: where the node's own kubeconfig is written")
        await load_client_cert(Path(args.kubeconfig), Path(s.bootstrap_kubeconfig), Path(s.cert_dir), s.hostname)
    client = Client(client_config(args, "kubelet/v1.32.0-pyk8s"))
    rotation = rotate_client_certificate(s, client)
    # As upstream's 10248: health only. Metrics are on the kubelet API, behind authn/authz (nodes/metrics).
    health = HealthServer(s.healthz_bind, s.healthz_port, metrics=False) if s.healthz_port else None
    started = asyncio.Event()
    if health is not None:
        health.add_readyz_check("started", started.is_set)
        await health.start()
    runner: Kubelet | HollowNodes
    api: KubeletServer | None = None
    serving: asyncio.Task[None] | None = None
    if s.hollow_nodes:
        # An explicit --address serves each hollow node's kubelet API there (each on a port of its own).
        runner = HollowNodes(client, s.hostname, s.hollow_nodes, options(s), labels=s.labels, taints=s.taints,
                             max_pods=s.max_pods, stages=s.hollow_stages, api_address=args.address,
                             api_auth=lambda node: api_auth(s, client, node), cert_dir=s.cert_dir,
                             client_ca_file=s.client_ca_file or None)
    else:
        if s.hollow:
            runtime = HollowRuntime(stages=s.hollow_stages)
        else:
            from kubelet_agent.cri.remote import RemoteRuntime

            runtime = RemoteRuntime(s.endpoint)
        runner = Kubelet(client, runtime, node_config(s), options(s))
    try:
        if isinstance(runner, Kubelet):
            api = await start_api(s, runner)
            serving = rotate_serving_certificate(s, client, api)
        await runner.start()
        started.set()
        log.info("kubelet started", node=s.hostname, hollow=s.hollow, nodes=s.hollow_nodes or 1)
        await asyncio.Event().wait()
    finally:
        for task in (rotation, serving):
            if task is not None:
                task.cancel()
        if api is not None:
            await api.stop()
        await runner.stop()
        if health is not None:
            await health.stop()
        await client.close()


if __name__ == "__main__":
    sys.exit(run(main(sys.argv[1:])))

"""What `pyk8s up` runs: one ProcessSpec per component, the node ones repeated per node.

A component joins the local cluster by adding one entry to `specs`: how to launch it, where it answers
health checks, which components must be ready first, and what to do around its start and stop.
"""

from __future__ import annotations

import os
import shutil
import ssl
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from deploy import addon_accounts, nodes
from deploy.bootstrap import (
    CLUSTER_CIDR,
    CONTROLLER_MANAGER,
    FRONT_PROXY_CLIENT,
    KUBELET_CLIENT,
    PROXY,
    SCHEDULER,
    SERVICE_CIDR,
    node_client,
)
from deploy.nodes import NodeNet
from deploy.state import DEFAULT_PORT, Settings, State, free_port, port_in_use

__all__ = ["DEFAULT_PORT", "ProcessSpec", "Settings", "State", "child_env", "free_port", "port_in_use", "specs"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: Hollow nodes are named <prefix>-0 .. <prefix>-(N-1).
HOLLOW_PREFIX = "hollow"

Hook = Callable[[State, httpx.AsyncClient], Awaitable[None]]
StopHook = Callable[[State], Awaitable[None]]


@dataclass(frozen=True)
class ProcessSpec:
    """One process of the local cluster.

    `argv` is built from the state so every command line names the state directory, which is how a pid
    file is told apart from an unrelated process that reused the pid. `listens` lists the ports it
    binds, checked before anything starts so a clash fails fast instead of leaving half a cluster.
    `health` is an http(s) URL answering 200 when ready, or unix:///path of a socket that accepts.
    `prepare` runs on every `up` once `needs` are ready, before the process is started if it is not
    running; `after_ready` runs once a freshly started process is ready; `before_stop`/`after_stop`
    bracket its stop in `down`.
    """

    name: str
    argv: Callable[[State], list[str]]
    health: Callable[[State], str]
    needs: tuple[str, ...] = ()
    enabled: Callable[[State], bool] = lambda state: True
    listens: Callable[[State], tuple[int, ...]] = lambda state: ()
    ready_timeout: float = 30.0
    #: The component serves /healthz on a port of its own, picked on first `up` and kept.
    health_port: bool = False
    prepare: Hook | None = None
    after_ready: Hook | None = None
    before_stop: StopHook | None = None
    after_stop: StopHook | None = None
    #: The real node this process belongs to ("" for cluster-wide ones).
    node: str = ""
    #: TLS settings of the health check when they are not the cluster CA's and the admin cert's.
    health_tls: Callable[[State], ssl.SSLContext] | None = None


def etcd_binary() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if found is None:
        raise FileNotFoundError("etcd not found: run deploy/install.sh, or pass --etcd-servers")
    return found


def _etcd_argv(state: State) -> list[str]:
    """A single member; a restarted member waits one election timeout before it serves, so it is short.

    Clients and peers speak TLS and must show a cert of etcd's own CA, as on kubeadm."""
    client = f"https://127.0.0.1:{state.settings.etcd_client_port}"
    peer = f"https://127.0.0.1:{state.settings.etcd_peer_port}"
    ca = state.pki.etcd("ca")[0]
    server_cert, server_key = state.pki.etcd("server")
    peer_cert, peer_key = state.pki.etcd("peer")
    return [
        etcd_binary(),
        "--name=pyk8s",
        f"--data-dir={state.root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=pyk8s={peer}",
        "--heartbeat-interval=100",
        "--election-timeout=500",
        "--logger=zap",
        f"--cert-file={server_cert}",
        f"--key-file={server_key}",
        "--client-cert-auth",
        f"--trusted-ca-file={ca}",
        f"--peer-cert-file={peer_cert}",
        f"--peer-key-file={peer_key}",
        "--peer-client-cert-auth",
        f"--peer-trusted-ca-file={ca}",
    ]


def _etcd_health_tls(state: State) -> ssl.SSLContext:
    """How the health check reaches etcd: etcd's CA, and the healthcheck-client cert it admits."""
    ctx = ssl.create_default_context(cafile=state.pki.etcd("ca")[0])
    ctx.load_cert_chain(*state.pki.etcd("healthcheck-client"))
    return ctx


def _apiserver_etcd_flags(state: State) -> list[str]:
    """The apiserver's client cert for the etcd `up` runs, or the files given for --etcd-servers."""
    s = state.settings
    if state.external_etcd:
        given = (("cafile", s.etcd_cafile), ("certfile", s.etcd_certfile), ("keyfile", s.etcd_keyfile))
        return [f"--etcd-{flag}={path}" for flag, path in given if path]
    cert, key = state.pki.apiserver_etcd_client
    return [f"--etcd-cafile={state.pki.etcd('ca')[0]}", f"--etcd-certfile={cert}", f"--etcd-keyfile={key}"]


def _python(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def advertise_address(state: State) -> str:
    """Where pods reach the apiserver through the `kubernetes` Service: the host's side of the node bridge.

    Without real nodes nothing outside the host talks to it, so it stays on loopback.
    """
    return nodes.bridge_ip(state) if state.settings.nodes else "127.0.0.1"


def _apiserver_argv(state: State) -> list[str]:
    cert, key = state.pki.apiserver
    kubelet_cert, kubelet_key = state.pki.client(KUBELET_CLIENT)
    sa_pub, sa_key = state.pki.service_account
    return [
        *_python("apiserver"),
        f"--etcd-servers={','.join(state.etcd_servers)}",
        *_apiserver_etcd_flags(state),
        f"--encryption-provider-config={state.settings.encryption_provider_config or state.pki.encryption_config}",
        f"--secure-port={state.settings.port}",
        # Nodes reach it on the bridge and kubeconfigs on loopback, so with nodes it listens everywhere.
        f"--bind-address={'0.0.0.0' if state.settings.nodes else '127.0.0.1'}",
        f"--advertise-address={advertise_address(state)}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--client-ca-file={state.pki.ca[0]}",
        # kubeadm's: kubelets are scoped by the Node authorizer and NodeRestriction, everyone else by RBAC.
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--enable-bootstrap-token-auth=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--kubelet-client-certificate={kubelet_cert}",
        f"--kubelet-client-key={kubelet_key}",
        f"--scheduler-health-url={_local_health('scheduler')(state)}",
        f"--controller-manager-health-url={_local_health('controller-manager')(state)}",
        f"--service-account-key-file={sa_pub}",
        f"--service-account-signing-key-file={sa_key}",
        *_front_proxy_flags(state),
    ]


def _front_proxy_flags(state: State) -> list[str]:
    """How the apiserver proxies to extension apiservers (the metrics server), as kubeadm configures it."""
    client_cert, client_key = state.pki.front_proxy_client
    return [f"--requestheader-client-ca-file={state.pki.front_proxy_ca[0]}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={client_cert}", f"--proxy-client-key-file={client_key}"]


def health_port(state: State, name: str) -> int:
    return state.settings.component_ports[name]


def _local_health(name: str, path: str = "/healthz") -> Callable[[State], str]:
    return lambda state: f"http://127.0.0.1:{health_port(state, name)}{path}"


def _own_port(name: str) -> Callable[[State], tuple[int, ...]]:
    return lambda state: (health_port(state, name),)


def _component(module: str, name: str, identity: str, *extra: str) -> Callable[[State], list[str]]:
    """argv of a component that talks to the apiserver with the kubeconfig of `identity`."""

    def argv(state: State) -> list[str]:
        return [*_python(module), f"--kubeconfig={state.component_kubeconfig(identity)}", "--bind-address=127.0.0.1",
                f"--secure-port={health_port(state, name)}", *extra]

    return argv


def _controller_manager_argv(state: State) -> list[str]:
    return [*_component("controller_manager", "controller-manager", CONTROLLER_MANAGER.name)(state),
            "--leader-elect=true", "--use-service-account-credentials=true",
            f"--root-ca-file={state.pki.ca[0]}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cluster-cidr={CLUSTER_CIDR}", "--allocate-node-cidrs=true",
            f"--cluster-signing-cert-file={state.pki.ca[0]}", f"--cluster-signing-key-file={state.pki.ca[1]}",
            "--controllers=*,bootstrapsigner,tokencleaner,pyk8s-hostpath-provisioner,pyk8s-service-lb",
            f"--service-lb-pool={state.settings.service_lb_pool}"]


def _noderoutes_argv(state: State) -> list[str]:
    pairs = [f"--netns={n.name}={n.netns}" for n in nodes.node_nets(state)]
    # Like flannel, a network agent that reads Nodes (and Services, EndpointSlices for the load-balancer
    # routes): kube-proxy's identity covers it.
    return [*_component("deploy.noderoutes", "noderoutes", PROXY.name)(state),
            f"--node-subnet={state.settings.node_subnet}",
            "--host-routes", f"--service-cidr={SERVICE_CIDR}", "--load-balancer-routes", *pairs]


def _dns_argv(state: State) -> list[str]:
    return [*_python("proxy_agent.dns"), f"--kubeconfig={state.component_kubeconfig(addon_accounts.DNS_KUBECONFIG)}",
            f"--bind-address={nodes.bridge_ip(state)}", f"--port={state.settings.dns_port}",
            f"--health-port={health_port(state, 'cluster-dns')}", "--health-bind-address=127.0.0.1",
            "--resolv-conf=/etc/resolv.conf"]


def _registry_argv(state: State) -> list[str]:
    return [*_python("image_registry"), f"--store={nodes.registry_store(state)}",
            f"--address={nodes.bridge_ip(state)}", f"--port={state.settings.registry_port}",
            "--bind-address=127.0.0.1", f"--secure-port={health_port(state, 'image-registry')}"]


def _hollow_argv(state: State) -> list[str]:
    return [*_python("kubelet_agent"), f"--kubeconfig={state.kubeconfig}",
            f"--hollow-nodes={state.settings.hollow_nodes}", f"--hostname-override={HOLLOW_PREFIX}",
            f"--root-dir={state.root / 'hollow'}", f"--healthz-port={health_port(state, 'hollow-nodes')}",
            "--healthz-bind-address=127.0.0.1",
            # Each node's kubelet API on loopback (the metrics server scrapes it), guarded as a real node's.
            "--address=127.0.0.1", f"--client-ca-file={state.pki.ca[0]}", "--anonymous-auth=false",
            "--authentication-token-webhook=true", "--authorization-mode=Webhook"]


def _metrics_server_argv(state: State) -> list[str]:
    kubeconfig = state.component_kubeconfig(addon_accounts.METRICS_KUBECONFIG)
    return [*_python("metrics_server"), f"--kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
            f"--secure-port={health_port(state, 'metrics-server')}", f"--cert-dir={nodes.metrics_server_dir(state)}",
            "--kubelet-insecure-tls", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            "--metric-resolution=10s",
            "--log-format=console"]


def _unverified_tls(state: State) -> ssl.SSLContext:
    """The metrics server's certificate is its own (self-signed); its health needs no trust."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def _register_metrics_server(state: State, http: httpx.AsyncClient) -> None:
    await nodes.ensure_metrics_server(state, http, health_port(state, "metrics-server"))


def _has_nodes(state: State) -> bool:
    return state.settings.nodes > 0


CONTROL_PLANE: tuple[ProcessSpec, ...] = (
    ProcessSpec(
        name="etcd",
        argv=_etcd_argv,
        health=lambda state: f"{state.etcd_servers[0]}/health",
        health_tls=_etcd_health_tls,
        enabled=lambda state: not state.external_etcd,
        listens=lambda state: (state.settings.etcd_client_port, state.settings.etcd_peer_port),
    ),
    ProcessSpec(
        name="apiserver",
        argv=_apiserver_argv,
        health=lambda state: f"{state.server}/readyz",
        needs=("etcd",),
        listens=lambda state: (state.settings.port,),
    ),
    ProcessSpec(
        name="controller-manager",
        argv=_controller_manager_argv,
        health=_local_health("controller-manager"),
        needs=("apiserver",),
        listens=_own_port("controller-manager"),
        health_port=True,
        prepare=addon_accounts.prepare_controller_manager,
    ),
    ProcessSpec(
        name="scheduler",
        argv=_component("scheduler", "scheduler", SCHEDULER.name, "--leader-elect=true"),
        health=_local_health("scheduler"),
        needs=("apiserver",),
        listens=_own_port("scheduler"),
        health_port=True,
    ),
    ProcessSpec(
        name="cluster-dns",
        argv=_dns_argv,
        health=_local_health("cluster-dns", "/readyz"),
        needs=("apiserver",),
        enabled=_has_nodes,
        listens=_own_port("cluster-dns"),
        health_port=True,
        prepare=addon_accounts.prepare_dns,
    ),
    ProcessSpec(
        name="image-registry",
        argv=_registry_argv,
        health=_local_health("image-registry", "/readyz"),
        enabled=_has_nodes,
        listens=lambda state: (health_port(state, "image-registry"), state.settings.registry_port),
        health_port=True,
        prepare=nodes.store_builtin_images,
    ),
    ProcessSpec(
        name="noderoutes",
        argv=_noderoutes_argv,
        health=_local_health("noderoutes", "/readyz"),
        needs=("apiserver",),
        enabled=_has_nodes,
        listens=_own_port("noderoutes"),
        health_port=True,
    ),
    ProcessSpec(
        name="metrics-server",
        argv=_metrics_server_argv,
        health=lambda state: f"https://127.0.0.1:{health_port(state, 'metrics-server')}/livez",
        health_tls=_unverified_tls,
        needs=("apiserver",),
        listens=_own_port("metrics-server"),
        health_port=True,
        prepare=addon_accounts.prepare_metrics_server,
        after_ready=_register_metrics_server,
    ),
    ProcessSpec(
        name="hollow-nodes",
        argv=_hollow_argv,
        health=_local_health("hollow-nodes", "/readyz"),
        needs=("apiserver",),
        enabled=lambda state: state.settings.hollow_nodes > 0,
        listens=_own_port("hollow-nodes"),
        ready_timeout=120.0,
        health_port=True,
    ),
)


def node_specs(node: NodeNet) -> tuple[ProcessSpec, ...]:
    """containerd, kubelet, kube-proxy and the network-policy agent of one real node."""
    containerd, kubelet, proxy = f"containerd-{node.name}", f"kubelet-{node.name}", f"kube-proxy-{node.name}"
    policy = f"network-policy-{node.name}"

    async def import_images(state: State, _http: httpx.AsyncClient) -> None:
        await nodes.import_images(state, node)

    async def stop_pods(_state: State) -> None:
        await nodes.stop_pods(node)

    async def clean_up(_state: State) -> None:
        nodes.kill_leftovers(node)
        await nodes.unmount_under(node.dir)

    def kubelet_argv(state: State) -> list[str]:
        return [*_python("kubelet_agent"), f"--kubeconfig={state.component_kubeconfig(node_client(node.name).name)}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.ip}", f"--container-runtime-endpoint={node.endpoint}",
                f"--cluster-dns={nodes.CLUSTER_DNS_IP}", f"--cni-conf-dir={node.cni_conf_dir}",
                f"--root-dir={node.kubelet_dir}", f"--node-netns={node.netns_path}",
                f"--non-masquerade-cidr={CLUSTER_CIDR}",
                f"--healthz-port={health_port(state, kubelet)}", "--healthz-bind-address=127.0.0.1",
                f"--client-ca-file={state.pki.ca[0]}", "--anonymous-auth=false",
                "--authentication-token-webhook=true", "--authorization-mode=Webhook"]

    def proxy_argv(state: State) -> list[str]:
        return [*_python("proxy_agent"), f"--kubeconfig={state.component_kubeconfig(PROXY.name)}",
                f"--hostname-override={node.name}",
                f"--proxy-mode={state.settings.proxy_mode}", f"--cluster-cidr={CLUSTER_CIDR}",
                f"--iptables-binary={node.bin_dir / 'iptables'}", f"--nft-binary={node.bin_dir / 'nft'}",
                f"--node-netns={node.netns_path}", f"--healthz-bind-address=127.0.0.1:{health_port(state, proxy)}",
                "--metrics-bind-address=127.0.0.1:0"]

    def policy_argv(state: State) -> list[str]:
        kubeconfig = state.component_kubeconfig(addon_accounts.NETWORK_POLICY_KUBECONFIG)
        return [*_python("proxy_agent.networkpolicy"), f"--kubeconfig={kubeconfig}",
                f"--hostname-override={node.name}", f"--nft-binary={node.bin_dir / 'nft'}",
                f"--iptables-binary={node.bin_dir / 'iptables'}", "--bind-address=127.0.0.1",
                # the node's packet filter is written with one tool: the proxy mode's
                f"--backend={'nftables' if state.settings.proxy_mode == 'nftables' else 'iptables'}",
                f"--secure-port={health_port(state, policy)}"]

    return (
        ProcessSpec(name=containerd, argv=lambda state: nodes.containerd_argv(node),
                    health=lambda state: f"unix://{node.socket}", after_ready=import_images,
                    before_stop=stop_pods, after_stop=clean_up, ready_timeout=60.0, node=node.name),
        ProcessSpec(name=kubelet, argv=kubelet_argv, health=_local_health(kubelet, "/readyz"),
                    needs=("controller-manager", "image-registry", containerd), listens=_own_port(kubelet),
                    health_port=True,
                    ready_timeout=60.0, node=node.name),
        ProcessSpec(name=proxy, argv=proxy_argv, health=_local_health(proxy), needs=("apiserver",),
                    listens=_own_port(proxy), health_port=True, ready_timeout=60.0, node=node.name),
        ProcessSpec(name=policy, argv=policy_argv, health=_local_health(policy, "/readyz"), needs=("apiserver",),
                    prepare=addon_accounts.prepare_network_policy,
                    listens=_own_port(policy), health_port=True, ready_timeout=60.0, node=node.name),
    )


def specs(state: State, node_nets: list[NodeNet] | None = None) -> list[ProcessSpec]:
    """Every process of the cluster in start order: the control plane, then each real node's."""
    out = list(CONTROL_PLANE)
    for node in nodes.node_nets(state) if node_nets is None else node_nets:
        out.extend(node_specs(node))
    return out


def child_env() -> dict[str, str]:
    """Make our packages importable by `python -m` children even without `pip install -e`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env

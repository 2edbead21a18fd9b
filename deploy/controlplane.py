"""`pyk8s init`: the first control-plane machine, as `kubeadm init` makes it. It writes the cluster's PKI
(kubeadm's layout), a kubeconfig per component with the component's own identity, the env files of the
control-plane and node units and containerd's config; starts the units (with systemd) and waits for the
apiserver; then creates a bootstrap token, the signed-for `cluster-info` ConfigMap and the cluster's DNS
Service, and answers the `pyk8s join` command that adds a machine."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import yaml
from cryptography import x509

from deploy import machine, nodes, tokens
from deploy.bootstrap import (
    ADMIN,
    CLUSTER_CIDR,
    CONTROLLER_MANAGER,
    PROXY,
    SCHEDULER,
    SERVICE_CIDR,
    ClientIdentity,
    apiserver_hosts,
    ensure_encryption_config,
    ensure_etcd_pki,
    ensure_pki,
    write_kubeconfig,
)
from deploy.clusterinfo import ensure_cluster_info
from deploy.discovery import ca_cert_hash
from deploy.machine import API_PORT, Layout
from services.auth import bootstraptoken as bt
from services.runtime import pki

#: the cluster DNS server runs as a host process on the control-plane machine, as the coredns service
#: account kubeadm's DNS add-on runs as, with kubeadm's system:coredns role
DNS = ClientIdentity("coredns", "system:serviceaccount:kube-system:coredns",
                     ("system:serviceaccounts", "system:serviceaccounts:kube-system"))
DNS_ROLE = "system:coredns"
DNS_PORT = 53
#: the unit Debian's etcd-server package enables; it would hold port 2379 that pyk8s-etcd listens on
DEBIAN_ETCD = "etcd.service"
READY_TIMEOUT = 300.0
#: kube-proxy on a joined machine runs with the node's credentials; this lets nodes read what it needs
NODE_PROXIER_BINDING = "pyk8s:node-proxier"
#: as kubeadm, workloads stay off the control-plane machine unless they tolerate it
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane:NoSchedule"


class InitError(Exception):
    """A step of init failed; the message names it."""


@dataclass(frozen=True)
class InitOptions:
    advertise_address: str
    node_name: str
    token: str = ""
    token_ttl: float = 24 * 3600.0
    pod_network_cidr: str = CLUSTER_CIDR
    service_cidr: str = SERVICE_CIDR
    port: int = API_PORT


def write_files(layout: Layout, opts: InitOptions) -> list[Path]:
    """Everything init writes before anything runs; existing PKI is kept, so running it again is safe."""
    ip, name = opts.advertise_address, opts.node_name
    server = f"https://{ip}:{opts.port}"
    pki_dir = layout.pki
    ensure_pki(pki_dir, apiserver_hosts([ip, name, socket.gethostname()], opts.service_cidr))
    ensure_etcd_pki(pki_dir, ["localhost", "127.0.0.1", "::1", ip, name])
    dns_pair = pki_dir.client(DNS)
    if not dns_pair[0].exists():
        pki.issue_client_cert(pki.CertKey.load(*pki_dir.ca), DNS.user, DNS.groups).write(*dns_pair)
    ensure_encryption_config(pki_dir)
    written = []
    for conf, identity in (("admin", ADMIN), ("scheduler", SCHEDULER), ("controller-manager", CONTROLLER_MANAGER),
                           ("kube-proxy", PROXY), ("dns", DNS)):
        path = layout.kubeconfig(conf)
        write_kubeconfig(path, server, pki_dir, identity)
        written.append(path)
    token = opts.token or bt.generate_token()
    ca_pem = pki_dir.ca[0].read_bytes()
    body = yaml.safe_dump(machine.bootstrap_kubeconfig(server, ca_pem, token), sort_keys=False)
    pki.write_file(layout.bootstrap_kubeconfig, body.encode(), 0o600)
    pki.write_file(layout.config_dir / "token", token.encode(), 0o600)
    written.append(machine.write_containerd_config(layout))
    etcd_client, etcd_peer = f"https://{ip}:2379", f"https://{ip}:2380"
    written += [
        machine.write_env(layout, "pyk8s-etcd", [
            f"--name={name}", f"--listen-client-urls={etcd_client},https://127.0.0.1:2379",
            f"--advertise-client-urls={etcd_client}", f"--listen-peer-urls={etcd_peer}",
            f"--initial-advertise-peer-urls={etcd_peer}", f"--initial-cluster={name}={etcd_peer}",
            "--initial-cluster-state=new"]),
        machine.write_env(layout, "pyk8s-apiserver", [
            "--etcd-servers=https://127.0.0.1:2379", f"--advertise-address={ip}", f"--secure-port={opts.port}",
            f"--service-cluster-ip-range={opts.service_cidr}", "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction"]),
        machine.write_env(layout, "pyk8s-controller-manager", [
            f"--cluster-cidr={opts.pod_network_cidr}", f"--service-cluster-ip-range={opts.service_cidr}",
            "--use-service-account-credentials=true"]),
        machine.write_env(layout, "pyk8s-scheduler", []),
        machine.write_env(layout, "pyk8s-dns", [f"--bind-address={ip}", f"--port={DNS_PORT}"]),
        *machine.node_env(layout, name, ip, layout.kubeconfig("kube-proxy"), opts.pod_network_cidr,
                          machine.dns_ip(opts.service_cidr), (f"--register-with-taints={CONTROL_PLANE_TAINT}",)),
    ]
    return written


def _admin_client(layout: Layout, server: str) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=str(layout.pki.ca[0]))
    context.load_cert_chain(*layout.pki.client(ADMIN))
    return httpx.AsyncClient(base_url=server, verify=context, timeout=10.0)


async def wait_ready(http: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        try:
            response = await http.get("/readyz")
            if response.status_code == 200:
                return
            last = f"{response.status_code} {response.text.strip()[:200]}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        await asyncio.sleep(0.2)
    raise InitError(f"the API server did not become ready within {READY_TIMEOUT:.0f}s: {last}")


async def _ensure(http: httpx.AsyncClient, collection: str, body: dict) -> None:
    response = await http.post(collection, content=orjson.dumps(body), headers={"Content-Type": "application/json"})
    if response.status_code not in (201, 409):
        raise InitError(f"creating {collection}/{body['metadata']['name']}: {response.status_code} {response.text}")


async def upload(layout: Layout, opts: InitOptions) -> str:
    """The steps that need the API: token, cluster-info, DNS, node-proxier; answers the join command."""
    server = f"https://{opts.advertise_address}:{opts.port}"
    token = (layout.config_dir / "token").read_text().strip()
    async with _admin_client(layout, server) as http:
        await wait_ready(http)
        secret = tokens.token_secret(token, opts.token_ttl, "The default bootstrap token generated by 'pyk8s init'.",
                                     list(tokens.DEFAULT_GROUPS), list(tokens.DEFAULT_USAGES))
        await _ensure(http, f"/api/v1/namespaces/{bt.NAMESPACE}/secrets", secret)
        await ensure_cluster_info(http, server, server, layout.pki.ca[0])
        await nodes.write_kube_dns(http, server, opts.advertise_address, DNS_PORT, machine.dns_ip(opts.service_cidr))
        for body in rbac_objects():
            plural = "clusterroles" if body["kind"] == "ClusterRole" else "clusterrolebindings"
            await _ensure(http, f"/apis/rbac.authorization.k8s.io/v1/{plural}", body)
    return join_command(f"{opts.advertise_address}:{opts.port}", token, layout.pki.ca[0])


def rbac_objects() -> list[dict]:
    """kubeadm's system:coredns role and binding, and the node-proxier binding kube-proxy on joined
    machines relies on."""
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": DNS_ROLE},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": DNS_ROLE},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": DNS_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NODE_PROXIER_BINDING},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "system:node-proxier"},
         "subjects": [{"apiGroup": rbac, "kind": "Group", "name": "system:nodes"}]},
    ]


def join_command(address: str, token: str, ca_file: Path) -> str:
    cert = x509.load_pem_x509_certificate(ca_file.read_bytes())
    return f"pyk8s join {address} --token {token} --discovery-token-ca-cert-hash {ca_cert_hash(cert)}"


async def start_units(units: tuple[str, ...], say: Callable[[str], None], disable: tuple[str, ...] = ()) -> None:
    """systemctl enable --now, when systemd runs this machine (after disabling `disable`, units that would
    take the same ports); otherwise say what to start."""
    if not machine.systemd_booted():
        say(f"[start] systemd is not running here: start {' '.join(units)} now (their ExecStart, in this order)")
        return
    if disable:
        proc = await asyncio.create_subprocess_exec("systemctl", "disable", "--now", *disable,
                                                    stderr=asyncio.subprocess.DEVNULL)
        await proc.wait()
    for argv in (("systemctl", "daemon-reload"), ("systemctl", "enable", "--now", *units)):
        proc = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise InitError(f"{' '.join(argv)}: {err.decode(errors='replace').strip()}")


async def init(layout: Layout, opts: InitOptions, say: Callable[[str], None] = print) -> str:
    written = await asyncio.to_thread(write_files, layout, opts)
    say(f"[certs] [kubeconfig] [env] wrote {len(written)} files under {layout.config_dir}")
    await start_units((*machine.CONTROL_PLANE_UNITS, *machine.NODE_UNITS), say, disable=(DEBIAN_ETCD,))
    say(f"[wait-control-plane] waiting for the API server at https://{opts.advertise_address}:{opts.port}")
    return await upload(layout, opts)

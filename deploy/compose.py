"""`python -m deploy.compose`: what docker-compose.yml's containers run around the components.

`pki` (a one-shot container) writes the cluster's PKI once into the `pki` volume and one kubeconfig per
component identity into that component's own volume, so no container sees another's key and `down`
then `up` keeps every certificate and the service-account key (tokens issued before stay valid).
`setup` (one-shot, as the admin) writes what kubeadm's addon phases write: the nodes' bootstrap token,
cluster-info, the kube-dns Service and the bindings for the identities. `node` is a node container's
entrypoint, like kind's: a kubelet client certificate for `system:node:<name>` by TLS bootstrap (a CSR
the csrapproving and csrsigning controllers answer), then containerd, the kubelet, kube-proxy and the
pod routes to the other nodes, in the container's own network namespace. `images` builds the
registry's busybox and pause images at image build time; `probe` is every service's healthcheck.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import os
import signal
import socket
import ssl
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import orjson
import structlog
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deploy import nodes, tokens
from deploy.bootstrap import (
    ADMIN,
    CLIENTS,
    CLUSTER_CIDR,
    ClientIdentity,
    PkiDir,
    apiserver_hosts,
    ensure_encryption_config,
    ensure_pki,
    write_kubeconfig,
)
from deploy.clusterinfo import ensure_cluster_info
from deploy.state import Settings, State
from services.auth import bootstraptoken as bt
from services.runtime import pki

log = structlog.get_logger("pyk8s-compose")

#: Where the volumes are mounted in every container, and the apiserver's name on the compose network.
ROOT = Path("/var/lib/pyk8s")
API_SERVER = "https://apiserver:6443"
#: The user the control-plane images run as (deploy/images/pyk8s.Dockerfile creates it).
RUN_AS = 10001
#: One process simulates every hollow node, so it cannot be one node's identity (the Node authorizer and
#: NodeRestriction would confine it to a node of that name): a user of its own, bound to system:node.
HOLLOW = ClientIdentity("hollow-nodes", "pyk8s:hollow-nodes")
#: Identity -> the volume (directory under ROOT) its kubeconfig goes in.
KUBECONFIG_DIRS = {"scheduler": "scheduler", "controller-manager": "controller-manager",
                   "kube-proxy": "kube-proxy", HOLLOW.name: "hollow"}
BOOTSTRAP_DIR = ROOT / "node-bootstrap"
NODE_BOOTSTRAP_GROUP = tokens.DEFAULT_GROUPS[0]
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
#: What compose binds on top of upstream's bootstrap policy, as kubeadm's addon phase does. Real kubelets
#: need nothing: the Node authorizer and NodeRestriction confine each to its own node, and the
#: controller-manager runs each controller as its own service account (--use-service-account-credentials).
BINDINGS = (("pyk8s:hollow-nodes", "system:node", "User", HOLLOW.user),)
POLL = 0.5
#: How long a node waits for its certificate, and for its containerd to answer.
BOOTSTRAP_TIMEOUT = 120.0


def pki_dir() -> PkiDir:
    return PkiDir(ROOT / "pki")


def _own(path: Path, uid: int, gid: int) -> None:
    for entry in [path, *path.rglob("*")]:
        os.chown(entry, uid, gid)


def write_pki(port: int, host_dir: Path, owner_of: Path) -> list[str]:
    """The PKI (kept once made), each identity's kubeconfig in its volume, the node bootstrap token, and
    `admin.conf` for the host (server 127.0.0.1:`port`) owned by whoever owns `owner_of` (the checkout)."""
    pki_files = pki_dir()
    ensure_pki(pki_files, apiserver_hosts(["apiserver"]))
    hollow = pki_files.client(HOLLOW)
    if not hollow[0].exists():
        pki.issue_client_cert(pki.CertKey.load(*pki_files.ca), HOLLOW.user, HOLLOW.groups).write(*hollow)
    ensure_encryption_config(pki_files)
    written = [str(pki_files.root)]
    by_name = {identity.name: identity for identity in (*CLIENTS, HOLLOW)}
    for name, directory in KUBECONFIG_DIRS.items():
        path = ROOT / directory / "kubeconfig"
        write_kubeconfig(path, API_SERVER, pki_files, by_name[name])
        _own(path.parent, RUN_AS, RUN_AS)
        written.append(str(path))
    token_file = BOOTSTRAP_DIR / "token"
    if not token_file.exists():
        pki.write_file(token_file, bt.generate_token().encode(), 0o600)
    pki.write_file(BOOTSTRAP_DIR / "ca.crt", pki_files.ca[0].read_bytes(), 0o644)
    written.append(str(token_file))
    _own(BOOTSTRAP_DIR, RUN_AS, RUN_AS)
    _own(pki_files.root, RUN_AS, RUN_AS)
    owner = owner_of.stat()
    host_config = host_dir / "admin.conf"
    write_kubeconfig(host_config, f"https://127.0.0.1:{port}", pki_files, ADMIN)
    os.chown(host_dir, owner.st_uid, owner.st_gid)
    os.chown(host_config, owner.st_uid, owner.st_gid)
    written.append(f"{host_config} (for uid {owner.st_uid}, server https://127.0.0.1:{port})")
    return written


def _admin_http() -> httpx.AsyncClient:
    files = pki_dir()
    ctx = ssl.create_default_context(cafile=files.ca[0])
    ctx.load_cert_chain(*files.client(ADMIN))
    return httpx.AsyncClient(verify=ctx)


async def setup(dns_host: str, dns_port: int) -> None:
    """The API objects the compose cluster needs beyond upstream's defaults; each is kept if present."""
    token = (BOOTSTRAP_DIR / "token").read_text().strip()
    async with _admin_http() as http:
        secret = tokens.token_secret(token, 0, "compose node bootstrap", [NODE_BOOTSTRAP_GROUP],
                                     list(tokens.DEFAULT_USAGES))
        base = f"{API_SERVER}/api/v1/namespaces/{bt.NAMESPACE}/secrets"
        await nodes.put_or_create(http, base, secret["metadata"]["name"], secret)
        for name, role, kind, subject in BINDINGS:
            body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]}
            await nodes.put_or_create(http, f"{API_SERVER}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                                      name, body)
        await ensure_cluster_info(http, API_SERVER, API_SERVER, pki_dir().ca[0])
        address = (await asyncio.get_running_loop().getaddrinfo(dns_host, None, family=socket.AF_INET))[0][4][0]
        await nodes.write_kube_dns(http, API_SERVER, address, dns_port)


# -- node containers -------------------------------------------------------------------------------


class NodeError(Exception):
    """The node container cannot start; the message says which step failed."""


async def _ip_json(*args: str) -> list[dict]:
    return orjson.loads(await nodes.run("ip", "-j", *args) or "[]")


async def node_address() -> tuple[str, ipaddress.IPv4Network]:
    """The container's address on the compose network (where its default route goes, not its pods'
    bridge), and that network (the node segment)."""
    routes = await _ip_json("-4", "route", "show", "default")
    if not routes:
        raise NodeError("no default route: the node container is not on a network")
    for link in await _ip_json("-4", "addr", "show", "dev", routes[0]["dev"]):
        for addr in link.get("addr_info") or []:
            if addr.get("family") == "inet":
                interface = ipaddress.IPv4Interface(f"{addr['local']}/{addr['prefixlen']}")
                return str(interface.ip), interface.network
    raise NodeError("no IPv4 address on the compose network")


#: Docker's embedded DNS server, in every container on a user-defined network.
DOCKER_DNS = ("127.0.0.11", 53)


def _ptr_query(ip: str, query_id: int = 0x7069) -> bytes:
    labels = [*reversed(ip.split(".")), "in-addr", "arpa"]
    qname = b"".join(bytes([len(label)]) + label.encode() for label in labels) + b"\0"
    return query_id.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + qname + b"\x00\x0c\x00\x01"


def _read_name(message: bytes, offset: int) -> tuple[str, int]:
    """A DNS name at `offset` (following compression pointers) and the offset after it."""
    labels, end = [], None
    while message[offset]:
        if message[offset] & 0xC0 == 0xC0:
            end = end or offset + 2
            offset = int.from_bytes(message[offset:offset + 2], "big") & 0x3FFF
            continue
        labels.append(message[offset + 1:offset + 1 + message[offset]].decode())
        offset += 1 + message[offset]
    return ".".join(labels), end or offset + 1


def ptr_answer(message: bytes) -> str:
    """The first PTR record's name in a DNS response ("" when there is none)."""
    answers = int.from_bytes(message[6:8], "big")
    _, offset = _read_name(message, 12)
    offset += 4
    for _ in range(answers):
        _, offset = _read_name(message, offset)
        rtype = int.from_bytes(message[offset:offset + 2], "big")
        length = int.from_bytes(message[offset + 8:offset + 10], "big")
        if rtype == 12:
            return _read_name(message, offset + 10)[0]
        offset += 10 + length
    return ""


def node_name(ip: str) -> str:
    """The container's name, which Docker's DNS answers for its address (project_node_1 with compose
    v1, project-node-1 with v2), as a DNS-1123 name: stable across `down` and `up`, unlike the
    hostname (the container id, which /etc/hosts maps the address to), so a recreated node is the
    same Node."""
    name = ""
    with contextlib.suppress(OSError, IndexError, UnicodeDecodeError), socket.socket(socket.AF_INET,
                                                                                      socket.SOCK_DGRAM) as udp:
        udp.settimeout(2.0)
        udp.sendto(_ptr_query(ip), DOCKER_DNS)
        name = ptr_answer(udp.recv(512))
    return (name or socket.gethostname()).split(".", 1)[0].lower().replace("_", "-")


def _csr(name: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{name}")])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


async def bootstrap_kubelet(name: str, out: Path) -> Path:
    """A kubeconfig for `system:node:<name>`, its certificate obtained with the bootstrap token as the
    kubelet's TLS bootstrap does; the certificate is kept and reused while valid for this name."""
    config, cert_file, key_file = out / "kubelet.conf", out / "kubelet.crt", out / "kubelet.key"
    ca_file = BOOTSTRAP_DIR / "ca.crt"
    with contextlib.suppress(OSError, ValueError):
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        current = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        if current == f"system:node:{name}" and cert.not_valid_after_utc.timestamp() > time.time() + 3600:
            return config
    key = ec.generate_private_key(ec.SECP256R1())
    token = (BOOTSTRAP_DIR / "token").read_text().strip()
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "node-csr-"},
            "spec": {"request": base64.b64encode(_csr(name, key)).decode(), "signerName": KUBELET_SIGNER,
                     "usages": ["digital signature", "client auth"]}}
    url = f"{API_SERVER}/apis/certificates.k8s.io/v1/certificatesigningrequests"
    ctx = ssl.create_default_context(cafile=ca_file)
    async with httpx.AsyncClient(verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=10.0) as http:
        async with asyncio.timeout(BOOTSTRAP_TIMEOUT):
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    posted = await http.post(url, content=orjson.dumps(body),
                                             headers={"Content-Type": "application/json"})
                    if posted.status_code == 201:
                        break
                    log.info("waiting to post the node's CSR", status=posted.status_code, body=posted.text[:200])
                await asyncio.sleep(POLL)
            csr_name = posted.json()["metadata"]["name"]
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    got = await http.get(f"{url}/{csr_name}")
                    issued = (got.json().get("status") or {}).get("certificate") if got.status_code == 200 else ""
                    if issued:
                        break
                await asyncio.sleep(POLL)
    pki.write_file(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()), 0o600)
    pki.write_file(cert_file, base64.b64decode(issued), 0o644)
    body_config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "pyk8s", "cluster": {"server": API_SERVER, "certificate-authority": str(ca_file)}}],
        "users": [{"name": f"system:node:{name}",
                   "user": {"client-certificate": str(cert_file), "client-key": str(key_file)}}],
        "contexts": [{"name": "pyk8s", "context": {"cluster": "pyk8s", "user": f"system:node:{name}"}}],
        "current-context": "pyk8s",
    }
    pki.write_file(config, yaml.safe_dump(body_config, sort_keys=False).encode(), 0o600)
    return config


def node_commands(name: str, ip: str, subnet: ipaddress.IPv4Network, kubelet_conf: Path,
                  containerd_config: Path) -> dict[str, list[str]]:
    """The node's processes; the kubelet's and kube-proxy's flags are those `pyk8s up` gives its nodes."""
    python = sys.executable
    proxy_conf = ROOT / "kube-proxy" / "kubeconfig"
    return {
        "containerd": ["containerd", "--config", str(containerd_config)],
        "kubelet": [python, "-m", "kubelet_agent", f"--kubeconfig={kubelet_conf}", f"--hostname-override={name}",
                    f"--node-ip={ip}", "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
                    f"--cluster-dns={nodes.CLUSTER_DNS_IP}", "--cni-conf-dir=/etc/cni/net.d",
                    "--root-dir=/var/lib/kubelet", f"--non-masquerade-cidr={CLUSTER_CIDR}",
                    "--healthz-port=10248", "--healthz-bind-address=127.0.0.1",
                    f"--client-ca-file={BOOTSTRAP_DIR / 'ca.crt'}", "--anonymous-auth=false",
                    "--authentication-token-webhook=true", "--authorization-mode=Webhook"],
        "kube-proxy": [python, "-m", "proxy_agent", f"--kubeconfig={proxy_conf}", f"--hostname-override={name}",
                       "--proxy-mode=iptables", f"--cluster-cidr={CLUSTER_CIDR}",
                       "--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:0"],
        # every other node's pod CIDR via that node's address; this node's own sits on its CNI bridge
        "noderoutes": [python, "-m", "deploy.noderoutes", f"--kubeconfig={proxy_conf}",
                       "--bind-address=127.0.0.1", "--secure-port=10258", f"--node-subnet={subnet}",
                       f"--netns={name}={NODE_NETNS}"],
    }


#: The container's own network namespace under a name, so noderoutes treats it as one node's.
NODE_NETNS = "node"
#: Snapshots as plain copies: overlayfs cannot stack on the container's own overlayfs, and a volume
#: under /var/lib/containerd would outlive the container (compose's `down` orphans such volumes).
NODE_SNAPSHOTTER = '[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "native"\n'


async def _wait_for_socket(path: Path) -> None:
    async with asyncio.timeout(BOOTSTRAP_TIMEOUT):
        while True:
            with contextlib.suppress(OSError):
                _reader, writer = await asyncio.open_unix_connection(str(path))
                writer.close()
                return
            await asyncio.sleep(0.1)


async def run_node(mirror: str) -> int:
    """Bootstrap, then run the node's processes until one exits or the container is stopped."""
    ip, subnet = await node_address()
    name = node_name(ip)
    structlog.contextvars.bind_contextvars(node=name)
    log.info("node starting", ip=ip, subnet=str(subnet))
    kubelet_conf = await bootstrap_kubelet(name, Path("/var/lib/pyk8s-node"))
    # Docker mounts these read-only in a container that is not privileged; the node's own namespaces
    # are what they show, and the node must set its sysctls and let CNI configure its bridge.
    for path in ("/proc/sys", "/sys"):
        await nodes.run("mount", "-o", "remount,rw", path)
    await nodes.run("sysctl", "-qew", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1")
    # a restarted container keeps its files but not the mount that named its previous namespace
    await nodes.run("ip", "netns", "delete", NODE_NETNS, check=False)
    await nodes.run("ip", "netns", "attach", NODE_NETNS, "1")
    containerd_dir = Path("/etc/containerd")
    nodes.write_registry_hosts(containerd_dir / "certs.d", mirror)
    config = containerd_dir / "config.toml"
    base = nodes.containerd_config(Path("/var/lib/containerd"), Path("/run/containerd"),
                                   Path("/run/containerd/containerd.sock"), Path("/etc/cni/net.d"),
                                   containerd_dir / "certs.d")
    config.write_text(base + NODE_SNAPSHOTTER)
    commands = node_commands(name, ip, subnet, kubelet_conf, config)
    procs: dict[str, asyncio.subprocess.Process] = {}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        procs["containerd"] = await asyncio.create_subprocess_exec(*commands.pop("containerd"))
        await _wait_for_socket(Path("/run/containerd/containerd.sock"))
        for process, argv in commands.items():
            procs[process] = await asyncio.create_subprocess_exec(*argv)
        waits = {asyncio.ensure_future(proc.wait()): process for process, proc in procs.items()}
        stopping = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([*waits, stopping], return_when=asyncio.FIRST_COMPLETED)
        exited = [waits[task] for task in done if task in waits]
        if exited:
            log.error("a node process exited", process=exited[0], code=procs[exited[0]].returncode)
            return 1
        return 0
    finally:
        for proc in reversed(list(procs.values())):
            if proc.returncode is None:
                proc.terminate()
        for proc in procs.values():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(8):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()


# -- image build and healthchecks --------------------------------------------------------------------


async def build_images(root: Path) -> list[str]:
    """busybox and pause, built as `pyk8s up` builds them, in a registry store under `root`."""
    state = State(root, Settings())
    stored = await nodes.store_images(state, await nodes.image_archives(state))
    return [f"{image.ref} in {nodes.registry_store(state)}" for image in stored]


def probe(url: str) -> bool:
    """GET `url` (TLS unverified: it is the container's own port); True on a 200."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as response:  # noqa: S310 - our own URL
            return bool(response.status == 200)
    except OSError:
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.compose", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    write = commands.add_parser("pki", help="write the PKI, the components' kubeconfigs and the host's admin.conf")
    write.add_argument("--port", type=int, default=int(os.environ.get("PYK8S_PORT") or 6443),
                       help="the host port compose publishes the apiserver on (default $PYK8S_PORT or 6443)")
    write.add_argument("--host-dir", type=Path, required=True, help="the host directory admin.conf goes in")
    write.add_argument("--owner-of", type=Path, required=True, help="a host file whose owner gets admin.conf")
    api = commands.add_parser("setup", help="the bootstrap token, bindings, cluster-info and kube-dns")
    api.add_argument("--dns-host", default="dns", help="the DNS server's name on the compose network")
    api.add_argument("--dns-port", type=int, default=5353)
    node = commands.add_parser("node", help="a node container: TLS bootstrap, containerd, kubelet, kube-proxy")
    node.add_argument("--registry-mirror", default="http://registry:5000", help="where containerd pulls from first")
    images = commands.add_parser("images", help="build busybox and pause into a registry store")
    images.add_argument("root", type=Path)
    check = commands.add_parser("probe", help="exit 0 when URL answers 200")
    check.add_argument("url")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "pki":
        print("\n".join(write_pki(args.port, args.host_dir, args.owner_of)))
    elif args.command == "setup":
        asyncio.run(setup(args.dns_host, args.dns_port))
        print("cluster objects in place")
    elif args.command == "node":
        return asyncio.run(run_node(args.registry_mirror))
    elif args.command == "images":
        print("\n".join(asyncio.run(build_images(args.root))))
    else:
        return 0 if probe(args.url) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Flags and KubeletConfiguration (kubelet.config.k8s.io/v1beta1): the file gives defaults, flags
given on the command line win, as upstream."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubelet_agent.cri.stages import DEFAULT_JOB_DURATION, Stage, default_stages, load_stages
from kubelet_agent.eviction import parse_eviction_flag, parse_thresholds
from kubelet_agent.node import parse_taint
from services.api.quantity import format_quantity, parse_quantity
from services.runtime import base_parser
from services.runtime.durations import duration as parse_duration
from services.runtime.durations import duration_flag

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"


def parse_bool(text: str) -> bool:
    """Go's boolean flag values: --flag, --flag=true, --flag=false (also 1/0, t/f)."""
    value = text.strip().lower()
    if value in ("1", "t", "true"):
        return True
    if value in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def parse_map(text: str) -> dict[str, str]:
    """`cpu=100m,memory=256Mi` -> dict."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        out[key] = value
    return out


@dataclass
class Settings:
    hostname: str = ""
    node_ips: list[str] = field(default_factory=list)
    endpoint: str = DEFAULT_ENDPOINT
    taints: list[dict[str, str]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    reserved: dict[str, str] = field(default_factory=dict)
    max_pods: int = 110
    pod_manifest_path: str = ""
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = "cluster.local"
    root_dir: str = "/var/lib/kubelet"
    pod_cidr: str = ""
    resolv_conf: str = "/etc/resolv.conf"
    healthz_port: int = 10248
    healthz_bind: str = "127.0.0.1"
    lease_duration: int = 40
    status_update: float = 10.0
    status_report: float = 300.0
    hollow: bool = False
    hollow_nodes: int = 0
    cni_conf_dir: str = "/etc/cni/net.d"
    node_netns: str = ""
    port: int = 10250
    address: str = "0.0.0.0"  # noqa: S104 - upstream's default: every address of the node
    tls_cert_file: str = ""
    tls_key_file: str = ""
    cert_dir: str = ""
    bootstrap_kubeconfig: str = ""
    rotate_certificates: bool = False
    rotate_server_certificates: bool = False
    client_ca_file: str = ""
    non_masquerade_cidr: str = "10.0.0.0/8"
    max_parallel_pod_starts: int = 0
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] = field(default_factory=dict)
    eviction_soft_grace_period: dict[str, float] = field(default_factory=dict)
    eviction_minimum_reclaim: dict[str, str] = field(default_factory=dict)
    eviction_max_pod_grace_period: int = 0
    eviction_pressure_transition: float = 300.0
    housekeeping: float = 10.0
    allowed_unsafe_sysctls: list[str] = field(default_factory=list)
    # The kubelet API's authentication and authorization, with KubeletConfiguration v1beta1's defaults.
    anonymous_auth: bool = False
    token_webhook: bool = True
    token_webhook_ttl: float = 120.0
    authorization_mode: str = "Webhook"
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    allow_privileged: bool = True
    hollow_stages: list[Stage] | None = None


def parser() -> argparse.ArgumentParser:
    p = base_parser("kubelet", "pyk8s node agent")
    p.add_argument("--config", default=None, help="KubeletConfiguration file")
    p.add_argument("--hostname-override", default=None)
    p.add_argument("--node-ip", default=None, help="comma-separated node IPs")
    p.add_argument("--container-runtime-endpoint", default=None)
    p.add_argument("--register-with-taints", default=None, help="key=value:Effect,...")
    p.add_argument("--node-labels", default=None, help="key=value,...")
    p.add_argument("--system-reserved", default=None)
    p.add_argument("--kube-reserved", default=None)
    p.add_argument("--max-pods", type=int, default=None)
    p.add_argument("--pod-manifest-path", default=None)
    p.add_argument("--cluster-dns", default=None, help="comma-separated DNS server IPs")
    p.add_argument("--cluster-domain", default=None)
    p.add_argument("--root-dir", default=None)
    p.add_argument("--pod-cidr", default=None)
    p.add_argument("--resolv-conf", default=None)
    p.add_argument("--healthz-port", type=int, default=None)
    p.add_argument("--healthz-bind-address", default=None)
    p.add_argument("--cni-conf-dir", default=None, help="where the node's CNI config is written")
    p.add_argument("--node-netns", default=None,
                   help="network namespace path of the node's containerd and pods (probes connect there)")
    p.add_argument("--port", type=int, default=None, help="port of the kubelet API (0: any free port)")
    p.add_argument("--address", default=None,
                   help="address of the kubelet API; the default 0.0.0.0 with --node-netns means the node IP "
                        "inside that namespace")
    p.add_argument("--cert-dir", default=None, help="where a self-signed serving cert is kept (<root-dir>/pki)")
    p.add_argument("--bootstrap-kubeconfig", default=None,
                   help="kubeconfig with a bootstrap token: when --kubeconfig is missing or expired, request a "
                        "client certificate with it and write --kubeconfig pointing at the certificate in --cert-dir")
    p.add_argument("--rotate-certificates", type=parse_bool, nargs="?", const=True, default=None,
                   help="request a new client certificate as the current one nears expiry (default false)")
    p.add_argument("--rotate-server-certificates", type=parse_bool, nargs="?", const=True, default=None,
                   help="request the kubelet API's serving certificate from the kubelet-serving signer and renew "
                        "it (default false; someone must approve each request)")
    p.add_argument("--client-ca-file", default=None,
                   help="client certificates this CA signed authenticate to the kubelet API")
    p.add_argument("--anonymous-auth", type=parse_bool, nargs="?", const=True, default=None,
                   help="serve requests no other method authenticates as system:anonymous (default false)")
    p.add_argument("--authentication-token-webhook", type=parse_bool, nargs="?", const=True, default=None,
                   help="check bearer tokens with a TokenReview against the apiserver (default true)")
    p.add_argument("--authentication-token-webhook-cache-ttl", default=None, help="e.g. 2m0s")
    p.add_argument("--authorization-mode", choices=("Webhook", "AlwaysAllow"), default=None,
                   help="Webhook: a SubjectAccessReview decides each request (default)")
    p.add_argument("--authorization-webhook-cache-authorized-ttl", default=None, help="e.g. 5m0s")
    p.add_argument("--authorization-webhook-cache-unauthorized-ttl", default=None, help="e.g. 30s")
    p.add_argument("--non-masquerade-cidr", default=None,
                   help="pod traffic to addresses outside this range is masqueraded (the cluster's addresses)")
    p.add_argument("--eviction-hard", default=None,
                   help="hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%%")
    p.add_argument("--eviction-soft", default=None,
                   help="soft eviction thresholds, e.g. memory.available<1.5Gi; each needs a grace period")
    p.add_argument("--eviction-soft-grace-period", default=None,
                   help="how long each soft threshold must hold before evicting, e.g. memory.available=1m30s")
    p.add_argument("--eviction-minimum-reclaim", default=None,
                   help="how far above a threshold eviction brings the signal, e.g. memory.available=500Mi")
    p.add_argument("--eviction-max-pod-grace-period", type=int, default=None,
                   help="longest grace period (seconds) a soft eviction gives a pod (default 0: the pod's own)")
    p.add_argument("--eviction-pressure-transition-period", default=None,
                   help="how long a pressure condition stays after its threshold clears (default 5m0s)")
    p.add_argument("--housekeeping-interval", default=None,
                   help="how often node pressure and emptyDir limits are checked (default 10s)")
    p.add_argument("--max-parallel-pod-starts", type=int, default=None,
                   help="sandbox creations and container starts in flight at once, oldest pod first "
                        "(default: four per CPU)")
    p.add_argument("--allow-privileged", type=parse_bool, nargs="?", const=True, default=None,
                   help="run containers that ask for securityContext.privileged (default true); when false, "
                        "such pods are rejected with reason Forbidden")
    p.add_argument("--allowed-unsafe-sysctls", default=None,
                   help="comma-separated unsafe sysctls or sysctl patterns (ending in *) pods may set")
    p.add_argument("--hollow", action="store_true", help="simulate containers in memory")
    p.add_argument("--hollow-nodes", type=int, default=0, help="run N hollow kubelets named <name>-<i>")
    p.add_argument("--hollow-job-duration", type=duration_flag, default=None,
                   help="how long the containers of a Job's pod run on a hollow node before they exit 0 "
                        f"(default {DEFAULT_JOB_DURATION:g}s)")
    p.add_argument("--hollow-stages", default=None, metavar="FILE",
                   help="YAML file of stages (kind HollowStages) replacing the default ones; the schema is "
                        "described in kubelet_agent/cri/stages.py and the README")
    return p


def _from_file(path: str) -> dict[str, Any]:
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    if doc.get("kind") not in (None, "KubeletConfiguration"):
        raise ValueError(f"{path}: kind {doc.get('kind')!r} is not KubeletConfiguration")
    return doc


def settings(args: argparse.Namespace) -> Settings:
    s = Settings()
    if args.config:
        doc = _from_file(args.config)
        s.cluster_dns = list(doc.get("clusterDNS") or [])
        s.cluster_domain = doc.get("clusterDomain", s.cluster_domain)
        s.max_pods = int(doc.get("maxPods", s.max_pods))
        s.pod_manifest_path = doc.get("staticPodPath", "")
        s.reserved = {**(doc.get("kubeReserved") or {})}
        for k, v in (doc.get("systemReserved") or {}).items():
            s.reserved[k] = v if k not in s.reserved else f"{_add(s.reserved[k], v)}"
        s.taints = [{k: v for k, v in t.items() if k in ("key", "value", "effect")}
                    for t in doc.get("registerWithTaints") or []]
        s.healthz_port = int(doc.get("healthzPort", s.healthz_port))
        s.healthz_bind = doc.get("healthzBindAddress", s.healthz_bind)
        s.endpoint = doc.get("containerRuntimeEndpoint", s.endpoint)
        s.pod_cidr = doc.get("podCIDR", "")
        s.resolv_conf = doc.get("resolvConf", s.resolv_conf)
        s.lease_duration = int(doc.get("nodeLeaseDurationSeconds", s.lease_duration))
        s.status_update = parse_duration(doc.get("nodeStatusUpdateFrequency", "10s"))
        s.status_report = parse_duration(doc.get("nodeStatusReportFrequency", "5m"))
        s.port = int(doc.get("port", s.port))
        if doc.get("evictionHard") is not None:
            s.eviction_hard = {str(k): str(v) for k, v in doc["evictionHard"].items()}
        s.eviction_soft = {str(k): str(v) for k, v in (doc.get("evictionSoft") or {}).items()}
        s.eviction_soft_grace_period = {str(k): parse_duration(v)
                                        for k, v in (doc.get("evictionSoftGracePeriod") or {}).items()}
        s.eviction_minimum_reclaim = {str(k): str(v) for k, v in (doc.get("evictionMinimumReclaim") or {}).items()}
        s.eviction_max_pod_grace_period = int(doc.get("evictionMaxPodGracePeriod", 0))
        s.eviction_pressure_transition = parse_duration(doc.get("evictionPressureTransitionPeriod", "5m"))
        s.address = doc.get("address", s.address)
        s.allowed_unsafe_sysctls = [str(x) for x in doc.get("allowedUnsafeSysctls") or ()]
        s.rotate_certificates = bool(doc.get("rotateCertificates", s.rotate_certificates))
        s.rotate_server_certificates = bool(doc.get("serverTLSBootstrap", s.rotate_server_certificates))
        s.tls_cert_file = doc.get("tlsCertFile", "")
        s.tls_key_file = doc.get("tlsPrivateKeyFile", "")
        authn, authz = doc.get("authentication") or {}, doc.get("authorization") or {}
        s.client_ca_file = (authn.get("x509") or {}).get("clientCAFile", "")
        s.anonymous_auth = bool((authn.get("anonymous") or {}).get("enabled", s.anonymous_auth))
        webhook = authn.get("webhook") or {}
        s.token_webhook = bool(webhook.get("enabled", s.token_webhook))
        s.token_webhook_ttl = parse_duration(webhook.get("cacheTTL", s.token_webhook_ttl))
        s.authorization_mode = authz.get("mode", s.authorization_mode)
        webhook = authz.get("webhook") or {}
        s.authorized_ttl = parse_duration(webhook.get("cacheAuthorizedTTL", s.authorized_ttl))
        s.unauthorized_ttl = parse_duration(webhook.get("cacheUnauthorizedTTL", s.unauthorized_ttl))
    s.hostname = (args.hostname_override or socket.gethostname()).lower()
    if args.node_ip:
        s.node_ips = [ip.strip() for ip in args.node_ip.split(",") if ip.strip()]
    if args.container_runtime_endpoint:
        s.endpoint = args.container_runtime_endpoint
    if args.register_with_taints:
        s.taints = [parse_taint(t) for t in args.register_with_taints.split(",") if t]
    if args.node_labels:
        s.labels = parse_map(args.node_labels)
    if args.system_reserved or args.kube_reserved:
        s.reserved = parse_map(args.kube_reserved or "")
        for k, v in parse_map(args.system_reserved or "").items():
            s.reserved[k] = v if k not in s.reserved else _add(s.reserved[k], v)
    for attr, flag in (("max_pods", "max_pods"), ("pod_manifest_path", "pod_manifest_path"),
                       ("cluster_domain", "cluster_domain"), ("root_dir", "root_dir"), ("pod_cidr", "pod_cidr"),
                       ("resolv_conf", "resolv_conf"), ("healthz_port", "healthz_port"),
                       ("healthz_bind", "healthz_bind_address"), ("cni_conf_dir", "cni_conf_dir"),
                       ("node_netns", "node_netns"), ("port", "port"), ("address", "address"),
                       ("tls_cert_file", "tls_cert_file"), ("tls_key_file", "tls_private_key_file"),
                       ("cert_dir", "cert_dir"), ("client_ca_file", "client_ca_file"),
                       ("bootstrap_kubeconfig", "bootstrap_kubeconfig"), ("rotate_certificates", "rotate_certificates"),
                       ("rotate_server_certificates", "rotate_server_certificates"),
                       ("non_masquerade_cidr", "non_masquerade_cidr"),
                       ("max_parallel_pod_starts", "max_parallel_pod_starts"), ("anonymous_auth", "anonymous_auth"),
                       ("token_webhook", "authentication_token_webhook"),
                       ("authorization_mode", "authorization_mode"), ("allow_privileged", "allow_privileged")):
        value = getattr(args, flag)
        if value is not None:
            setattr(s, attr, value)
    for attr, flag in (("token_webhook_ttl", "authentication_token_webhook_cache_ttl"),
                       ("authorized_ttl", "authorization_webhook_cache_authorized_ttl"),
                       ("unauthorized_ttl", "authorization_webhook_cache_unauthorized_ttl")):
        if getattr(args, flag) is not None:
            setattr(s, attr, parse_duration(getattr(args, flag)))
    if args.eviction_hard is not None:
        s.eviction_hard = parse_eviction_flag(args.eviction_hard)
    if args.eviction_soft is not None:
        s.eviction_soft = parse_eviction_flag(args.eviction_soft)
    if args.eviction_soft_grace_period is not None:
        grace = parse_map(args.eviction_soft_grace_period)
        s.eviction_soft_grace_period = {k: parse_duration(v) for k, v in grace.items()}
    if args.eviction_minimum_reclaim is not None:
        s.eviction_minimum_reclaim = parse_map(args.eviction_minimum_reclaim)
    if args.eviction_max_pod_grace_period is not None:
        s.eviction_max_pod_grace_period = args.eviction_max_pod_grace_period
    if args.eviction_pressure_transition_period is not None:
        s.eviction_pressure_transition = parse_duration(args.eviction_pressure_transition_period)
    if args.housekeeping_interval is not None:
        s.housekeeping = parse_duration(args.housekeeping_interval)
    parse_thresholds(s.eviction_hard or {}, soft=s.eviction_soft, grace_periods=s.eviction_soft_grace_period,
                     min_reclaim=s.eviction_minimum_reclaim)
    if s.max_parallel_pod_starts < 0:
        raise ValueError(f"--max-parallel-pod-starts must be 0 (the default) or more, not {s.max_parallel_pod_starts}")
    if args.allowed_unsafe_sysctls is not None:
        s.allowed_unsafe_sysctls = [x.strip() for x in args.allowed_unsafe_sysctls.split(",") if x.strip()]
    if args.cluster_dns:
        s.cluster_dns = [ip.strip() for ip in args.cluster_dns.split(",") if ip.strip()]
    s.hollow = bool(args.hollow or args.hollow_nodes)
    if args.hollow_stages:
        s.hollow_stages = load_stages(args.hollow_stages)
    else:
        job_duration = DEFAULT_JOB_DURATION if args.hollow_job_duration is None else args.hollow_job_duration
        if job_duration < 0:
            raise ValueError(f"--hollow-job-duration must not be negative, not {args.hollow_job_duration}")
        s.hollow_stages = default_stages(job_duration)
    s.hollow_nodes = args.hollow_nodes
    if not s.node_ips:
        s.node_ips = [_default_ip()]
    s.cert_dir = s.cert_dir or f"{s.root_dir}/pki"
    return s


def _add(a: str, b: str) -> str:
    return format_quantity(parse_quantity(a) + parse_quantity(b), a)


def _default_ip() -> str:
    """The address of the interface the default route uses (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"

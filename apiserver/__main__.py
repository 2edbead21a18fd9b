"""`python -m apiserver`: the Kubernetes API server on etcd."""

from __future__ import annotations

import argparse
import asyncio
import gc
import ipaddress
import logging
import ssl
import sys
from pathlib import Path

import structlog
import uvicorn

from apiserver.admission.chain import UnknownPlugin, check_flags
from apiserver.admission.config import AdmissionConfigError
from apiserver.aggregator.authconfig import RequestHeaderOptions
from apiserver.audit import options as audit_options
from apiserver.auth.authn import load_token_file
from apiserver.auth.authz import MODES as AUTHORIZATION_MODES
from apiserver.controlplane.leases import DEFAULT_TTL
from apiserver.endpoints.app import APIApp
from apiserver.endpoints.handlers.proxy import KubeletClientConfig
from apiserver.registry.componentstatus import DEFAULT_CONTROLLER_MANAGER_URL, DEFAULT_SCHEDULER_URL
from apiserver.server import DEFAULT_CERT_DIR, APIServer, Options
from apiserver.serving import options as serving_options
from apiserver.serving.connections import guarded_protocol
from apiserver.storage.encryption import ConfigError, load_config
from apiserver.storage.grpc_wire import client_tls
from services.runtime import int_flag
from services.runtime.durations import go_duration
from services.runtime.hostaddress import NoHostAddress, resolve_bind_address


def event_ttl(text: str) -> int:
    """--event-ttl in whole seconds: etcd leases count in seconds, and 0 keeps events for good."""
    try:
        seconds = go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds != 0 and seconds < 1:
        raise argparse.ArgumentTypeError(f'must be 0 or at least 1s, "{text}" given')
    return int(seconds)


def lease_ttl(text: str) -> int:
    """--endpoint-reconciler-ttl in whole seconds, as etcd leases count."""
    try:
        seconds = go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds < 1 or seconds != int(seconds):
        raise argparse.ArgumentTypeError(f'must be a whole number of seconds, at least 1s, "{text}" given')
    return int(seconds)


def advertise_address(args: argparse.Namespace) -> str:
    """--advertise-address, defaulted as upstream: the bind address, or the host's own for 0.0.0.0 and loopback."""
    if args.advertise_address and not ipaddress.ip_address(args.advertise_address).is_unspecified:
        return str(args.advertise_address)
    try:
        return resolve_bind_address(args.bind_address)
    except NoHostAddress as exc:
        raise SystemExit(f"apiserver: unable to find a suitable network address: {exc}; set --advertise-address "
                         "directly or give a valid --bind-address") from None


def ip_literal(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f'"{text}" is not a valid IP address') from None


positive_int = int_flag(1, "must be greater than 0, {value} given")


def go_bool(text: str) -> bool:
    """A boolean flag value as Go's strconv.ParseBool reads it (`--anonymous-auth=false`)."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise argparse.ArgumentTypeError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def authorization_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    for mode in modes:
        if mode not in AUTHORIZATION_MODES:
            raise argparse.ArgumentTypeError(f'authorization-mode "{mode}" is not a valid mode')
    if not modes:
        raise argparse.ArgumentTypeError("at least one authorization-mode must be passed")
    return modes


def token_file(path: str) -> str:
    """--token-auth-file, read once here so a missing or malformed file is a usage error, not a traceback."""
    if path:
        try:
            load_token_file(path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return path


def name_list(text: str) -> list[str]:
    """A comma-separated flag value (pflag's StringSlice), empty items dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def encryption_config(path: str) -> str:
    """--encryption-provider-config, checked here so a bad file is a usage error that says what is wrong."""
    if path:
        try:
            load_config(path)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return path


def etcd_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS client settings for `https://` etcd servers from --etcd-cafile/--etcd-certfile/--etcd-keyfile."""
    if not (args.etcd_cafile or args.etcd_certfile or args.etcd_keyfile):
        return None
    if bool(args.etcd_certfile) != bool(args.etcd_keyfile):
        raise SystemExit("apiserver: --etcd-certfile and --etcd-keyfile must be given together")
    try:
        return client_tls(args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(f"apiserver: invalid --etcd-cafile, --etcd-certfile or --etcd-keyfile: {exc}") from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="apiserver", description="pyk8s API server")
    p.add_argument("--etcd-servers", default="http://127.0.0.1:2379", help="comma-separated etcd client URLs")
    p.add_argument("--etcd-prefix", default="/registry")
    p.add_argument("--etcd-compaction-interval", type=float, default=300.0, help="seconds; 0 disables")
    p.add_argument("--etcd-cafile", default="", help="CA that signs the https:// etcd servers' certificates")
    p.add_argument("--etcd-certfile", default="", help="client certificate the apiserver presents to etcd")
    p.add_argument("--etcd-keyfile", default="", help="private key of --etcd-certfile")
    p.add_argument("--encryption-provider-config", type=encryption_config, default="", metavar="FILE",
                   help="an EncryptionConfiguration: how each resource is encrypted in etcd")
    p.add_argument("--event-ttl", type=event_ttl, default=3600, metavar="DURATION",
                   help="how long events are kept after their last write (default 1h0m0s)")
    p.add_argument("--lease-reuse-duration-seconds", type=positive_int, default=60, metavar="SECONDS",
                   help="how long one etcd lease is reused for objects with a TTL (events)")
    p.add_argument("--bind-address", type=ip_literal, default="0.0.0.0",
                   help="the IP the secure port listens on (default 0.0.0.0: every interface)")
    p.add_argument("--secure-port", type=int, default=6443, help="HTTPS port; 0 disables")
    p.add_argument("--insecure-port", type=int, default=0, help="plain HTTP on 127.0.0.1 (tests); 0 disables")
    p.add_argument("--tls-cert-file", default="")
    p.add_argument("--tls-private-key-file", default="")
    p.add_argument("--cert-dir", default=None,
                   help="where a self-signed cert is kept when none is given (default /var/run/pyk8s)")
    p.add_argument("--client-ca-file", default="")
    p.add_argument("--token-auth-file", type=token_file, default="",
                   help="static bearer tokens: CSV token,user,uid,\"group1,group2\"")
    p.add_argument("--enable-bootstrap-token-auth", type=go_bool, nargs="?", const=True, default=False,
                   help="bearer tokens of bootstrap.kubernetes.io/token Secrets in kube-system authenticate")
    p.add_argument("--anonymous-auth", type=go_bool, nargs="?", const=True, default=True,
                   help="serve requests without credentials as system:anonymous (default true)")
    p.add_argument("--authorization-mode", type=authorization_modes, default=["AlwaysAllow"],
                   help="comma-separated, in order: AlwaysAllow, AlwaysDeny, RBAC (default AlwaysAllow)")
    p.add_argument("--advertise-address", type=ip_literal, default=None,
                   help="the IP the `kubernetes` Service's endpoints list for this apiserver; default: "
                        "--bind-address, or the host's default-route address when that is 0.0.0.0 or loopback")
    p.add_argument("--endpoint-reconciler-type", choices=("lease", "none"), default="lease",
                   help="lease: every live apiserver keeps itself in the `kubernetes` endpoints (default)")
    p.add_argument("--endpoint-reconciler-ttl", type=lease_ttl, default=DEFAULT_TTL, metavar="DURATION",
                   help="how long an apiserver's endpoint lease outlives it (default 15s, upstream's fixed value); "
                        "it is refreshed every two thirds of that")
    p.add_argument("--service-cluster-ip-range", default="10.96.0.0/12")
    p.add_argument("--service-node-port-range", default="30000-32767")
    p.add_argument("--service-account-issuer", default="https://kubernetes.default.svc.cluster.local")
    p.add_argument("--service-account-signing-key-file", default="",
                   help="EC private key that signs service-account tokens (default: sa.key kept in an explicitly "
                        "given --cert-dir, else a key of this process only)")
    p.add_argument("--service-account-key-file", action="append", default=[], metavar="FILE",
                   help="PEM public (or private) key that verifies service-account tokens; repeatable "
                        "(default: the signing key's)")
    p.add_argument("--api-audiences", default="", help="comma-separated; default: the issuer")
    p.add_argument("--kubelet-certificate-authority", default="", help="CA that signs kubelet serving certs")
    p.add_argument("--kubelet-client-certificate", default="")
    p.add_argument("--kubelet-client-key", default="")
    p.add_argument("--kubelet-preferred-address-types",
                   default="InternalIP,ExternalIP,Hostname,InternalDNS,ExternalDNS")
    p.add_argument("--default-not-ready-toleration-seconds", type=int, default=300,
                   help="tolerationSeconds of the not-ready:NoExecute toleration added to pods without one")
    p.add_argument("--default-unreachable-toleration-seconds", type=int, default=300,
                   help="tolerationSeconds of the unreachable:NoExecute toleration added to pods without one")
    p.add_argument("--enable-admission-plugins", type=name_list, default=[], metavar="NAMES",
                   help="admission plugins to run besides the default-enabled ones; they run in upstream's "
                        "order whatever order they are given in")
    p.add_argument("--disable-admission-plugins", type=name_list, default=[], metavar="NAMES",
                   help="default-enabled admission plugins not to run")
    p.add_argument("--admission-control-config-file", default="", metavar="FILE",
                   help="AdmissionConfiguration with the plugins' configuration (e.g. PodSecurity's defaults and "
                        "exemptions)")
    p.add_argument("--scheduler-health-url", default=DEFAULT_SCHEDULER_URL,
                   help="what `kubectl get componentstatuses` probes for the scheduler (pyk8s; upstream's is fixed)")
    p.add_argument("--controller-manager-health-url", default=DEFAULT_CONTROLLER_MANAGER_URL,
                   help="what `kubectl get componentstatuses` probes for the controller-manager (pyk8s)")
    p.add_argument("--requestheader-client-ca-file", default="",
                   help="CA of the front proxy's client certificate, which extension apiservers trust to name "
                        "the user in request headers")
    p.add_argument("--requestheader-allowed-names", type=name_list, default=[],
                   help="common names the front proxy's certificate may carry (empty: any)")
    p.add_argument("--requestheader-username-headers", type=name_list, default=["X-Remote-User"])
    p.add_argument("--requestheader-group-headers", type=name_list, default=["X-Remote-Group"])
    p.add_argument("--requestheader-extra-headers-prefix", type=name_list, default=["X-Remote-Extra-"])
    p.add_argument("--proxy-client-cert-file", default="",
                   help="client certificate this apiserver presents to extension apiservers it proxies to")
    p.add_argument("--proxy-client-key-file", default="", help="private key of --proxy-client-cert-file")
    p.add_argument("--v", type=int, default=0, help="log verbosity")
    p.add_argument("--log-format", choices=("console", "json"), default="console")
    serving_options.add_flags(p)
    audit_options.add_flags(p)
    args = p.parse_args(argv)
    try:
        check_flags(args.enable_admission_plugins, args.disable_admission_plugins)
    except UnknownPlugin as exc:
        p.error(str(exc))
    return args


def _configure_logging(verbosity: int, fmt: str) -> None:
    level = logging.DEBUG if verbosity >= 4 else logging.INFO
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
    )


def self_signed_hosts(options: Options) -> list[str]:
    """What a generated serving cert covers, as upstream's: the advertise address, loopback, and the
    `kubernetes` Service's names and IP, so pods verify it through https://kubernetes.default.svc."""
    service_ip = str(next(ipaddress.ip_network(options.service_cluster_ip_range, strict=False).hosts()))
    return ["localhost", options.advertise_address, "127.0.0.1", service_ip,
            "kubernetes.default.svc", "kubernetes.default", "kubernetes"]


def kubelet_config(args: argparse.Namespace) -> KubeletClientConfig:
    """How the apiserver reaches kubelets for logs, exec, attach, port-forward and node proxying."""
    return KubeletClientConfig(
        preferred_address_types=[t for t in args.kubelet_preferred_address_types.split(",") if t],
        ca_file=args.kubelet_certificate_authority or None,
        client_cert=args.kubelet_client_certificate or None,
        client_key=args.kubelet_client_key or None,
    )


async def serve(args: argparse.Namespace) -> None:
    low, _, high = args.service_node_port_range.partition("-")
    advertise = advertise_address(args)
    options = Options(
        etcd_servers=[s.strip() for s in args.etcd_servers.split(",") if s.strip()],
        etcd_prefix=args.etcd_prefix,
        etcd_tls=etcd_tls(args),
        encryption_provider_config=args.encryption_provider_config,
        service_cluster_ip_range=args.service_cluster_ip_range,
        service_node_port_range=(int(low), int(high or low)),
        compaction_interval=args.etcd_compaction_interval or 10**9,
        advertise_address=advertise,
        secure_port=args.secure_port or args.insecure_port,
        endpoint_reconciler_type=args.endpoint_reconciler_type,
        endpoint_reconciler_ttl=args.endpoint_reconciler_ttl,
        cert_dir=args.cert_dir or DEFAULT_CERT_DIR,
        service_account_key_files=args.service_account_key_file,
        service_account_key_dir="" if args.service_account_signing_key_file else args.cert_dir or "",
        service_account_issuer=args.service_account_issuer,
        service_account_signing_key_file=args.service_account_signing_key_file,
        api_audiences=[a for a in args.api_audiences.split(",") if a],
        event_ttl=args.event_ttl,
        lease_reuse_duration_seconds=args.lease_reuse_duration_seconds,
        authorization_modes=args.authorization_mode,
        token_auth_file=args.token_auth_file,
        enable_bootstrap_token_auth=args.enable_bootstrap_token_auth,
        anonymous_auth=args.anonymous_auth,
        default_not_ready_toleration_seconds=args.default_not_ready_toleration_seconds,
        default_unreachable_toleration_seconds=args.default_unreachable_toleration_seconds,
        enable_admission_plugins=args.enable_admission_plugins,
        disable_admission_plugins=args.disable_admission_plugins,
        admission_control_config_file=args.admission_control_config_file,
        scheduler_health_url=args.scheduler_health_url,
        controller_manager_health_url=args.controller_manager_health_url,
        client_ca_file=args.client_ca_file,
        requestheader=RequestHeaderOptions(
            client_ca_file=args.requestheader_client_ca_file, allowed_names=args.requestheader_allowed_names,
            username_headers=args.requestheader_username_headers, group_headers=args.requestheader_group_headers,
            extra_headers_prefix=args.requestheader_extra_headers_prefix),
        proxy_client_cert_file=args.proxy_client_cert_file,
        proxy_client_key_file=args.proxy_client_key_file,
    )
    try:
        server = APIServer(options)
    except AdmissionConfigError as exc:
        sys.exit(f"apiserver: {exc}")
    audit = audit_options.auditor(args)
    app = APIApp(server, kubelet_config(args), audit, serving_options.max_in_flight(args))
    configs = []
    # wsproto: kubectl's port-forward offers the subprotocol `SPDY/3.1+portforward.k8s.io`, which the
    # websockets library refuses (it is no RFC 6455 token) and kubectl would fall back to SPDY.
    # No proxy-header rewriting (upstream trusts no X-Forwarded-For for the client address) and no
    # Server header (upstream sends none): both cost time on every request.
    # The header deadline and size cap, and the idle timeout, as upstream's secure server sets them.
    limits = serving_options.connection_limits(args)
    common = {"loop": "uvloop", "http": guarded_protocol(limits), "ws": "wsproto", "log_level": "warning",
              "access_log": False, "timeout_graceful_shutdown": 5, "lifespan": "on",
              "proxy_headers": False, "server_header": False, "timeout_keep_alive": limits.idle_timeout}
    if args.secure_port:
        cert, key = args.tls_cert_file, args.tls_private_key_file
        if not cert or not key:
            from services.runtime.pki import ensure_self_signed

            cert_path, key_path = ensure_self_signed(Path(options.cert_dir), self_signed_hosts(options))
            cert, key = str(cert_path), str(key_path)
        configs.append(uvicorn.Config(app, host=args.bind_address, port=args.secure_port, ssl_certfile=cert,
                                      ssl_keyfile=key, ssl_ca_certs=args.client_ca_file or None,
                                      ssl_cert_reqs=ssl.CERT_OPTIONAL if args.client_ca_file else ssl.CERT_NONE,
                                      **common))
    if args.insecure_port:
        configs.append(uvicorn.Config(app, host="127.0.0.1", port=args.insecure_port,
                                      **{**common, "lifespan": "off" if configs else "on"}))
    if not configs:
        raise SystemExit("apiserver: one of --secure-port or --insecure-port must be set")
    servers = [uvicorn.Server(c) for c in configs]
    try:
        if len(servers) == 1:
            await servers[0].serve()
            return
        await server.start()
        try:
            servers[0].config.lifespan = "off"
            await asyncio.gather(*(s.serve() for s in servers))
        finally:
            await server.stop()
    finally:
        if audit is not None:
            await asyncio.to_thread(audit.backend.close)


def tune_gc() -> None:
    """Collect young objects less often: the watch cache holds millions of long-lived dicts, and the
    default thresholds make full collections walk them many times a second under load (p99 create
    latency 200 ms with the defaults, 40 ms with these)."""
    gc.set_threshold(50_000, 50, 100)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    tune_gc()
    serving_options.raise_open_files_limit()
    _configure_logging(args.v, args.log_format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()

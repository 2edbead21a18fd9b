"""The apiserver process: storage, watch cache, one REST store per resource, bootstrap."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import structlog

from apiserver.admission import chain
from apiserver.admission import config as admission_config
from apiserver.admission.interfaces import PluginConfig
from apiserver.aggregator.authconfig import RequestHeaderOptions, ensure_authentication_configmap
from apiserver.aggregator.autoregister import local_apiservices
from apiserver.aggregator.handler import Aggregator
from apiserver.aggregator.transport import ProxyClientConfig
from apiserver.auth.bootstrap_policy import Stores, ensure_bootstrap_policy
from apiserver.auth.tokens import DEFAULT_ISSUER, TokenIssuer
from apiserver.controlplane.admissionpolicy_status import status_loop as admissionpolicy_status_loop
from apiserver.controlplane.endpoints_adapter import EndpointsAdapter
from apiserver.controlplane.flowcontrol import ensure_bootstrap_configuration
from apiserver.controlplane.flowcontrol import status_loop as flowcontrol_status_loop
from apiserver.controlplane.kubernetes_service import NAME as KUBERNETES_SERVICE
from apiserver.controlplane.kubernetes_service import NAMESPACE as KUBERNETES_NAMESPACE
from apiserver.controlplane.kubernetes_service import KubernetesServiceController, ServiceConfig
from apiserver.controlplane.leases import DEFAULT_TTL, MasterLeases
from apiserver.controlplane.reconciler import LeaseEndpointReconciler
from apiserver.customresources import CustomResourceServer
from apiserver.registry.componentstatus import DEFAULT_CONTROLLER_MANAGER_URL, DEFAULT_SCHEDULER_URL
from apiserver.registry.scheduling import SYSTEM_PRIORITY_CLASSES
from apiserver.registry.store import RESTStore, ServerContext, WriteOptions
from apiserver.registry.strategies import strategy_for
from apiserver.storage.cache import WatchCache
from apiserver.storage.encryption import load_config
from apiserver.storage.etcd import EtcdStore
from services.api import errors
from services.api.catalog import Catalog

log = structlog.get_logger("apiserver")

DEFAULT_CERT_DIR = "/var/run/pyk8s"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Options:
    etcd_servers: list[str] = field(default_factory=lambda: ["http://127.0.0.1:2379"])
    etcd_prefix: str = "/registry"
    #: TLS client settings for https:// etcd servers (--etcd-cafile, --etcd-certfile, --etcd-keyfile)
    etcd_tls: ssl.SSLContext | None = None
    #: --encryption-provider-config: an EncryptionConfiguration file; empty stores everything in plaintext
    encryption_provider_config: str = ""
    service_cluster_ip_range: str = "10.96.0.0/12"
    service_node_port_range: tuple[int, int] = (30000, 32767)
    compaction_interval: float = 300.0
    advertise_address: str = "127.0.0.1"
    secure_port: int = 6443
    #: --endpoint-reconciler-type: "lease" (every live apiserver in the `kubernetes` endpoints) or "none".
    endpoint_reconciler_type: str = "lease"
    #: Seconds an apiserver's lease outlives its last refresh; it refreshes every two thirds of that.
    endpoint_reconciler_ttl: int = DEFAULT_TTL
    cert_dir: str = DEFAULT_CERT_DIR
    service_account_issuer: str = DEFAULT_ISSUER
    service_account_signing_key_file: str = ""
    #: --service-account-key-file (repeatable): the public keys tokens verify with; default the signing key's.
    service_account_key_files: list[str] = field(default_factory=list)
    #: Where a signing key is kept when no file is named (an explicit --cert-dir); "" keeps it in memory only.
    service_account_key_dir: str = ""
    api_audiences: list[str] = field(default_factory=list)
    #: Seconds etcd keeps each Event after its last write (--event-ttl); 0 keeps them for good.
    event_ttl: int = 3600
    lease_reuse_duration_seconds: int = 60
    #: --authorization-mode, in order (AlwaysAllow, AlwaysDeny, RBAC).
    authorization_modes: list[str] = field(default_factory=lambda: ["AlwaysAllow"])
    token_auth_file: str = ""
    #: --enable-bootstrap-token-auth: kube-system bootstrap token Secrets authenticate joining machines
    enable_bootstrap_token_auth: bool = False
    anonymous_auth: bool = True
    #: DefaultTolerationSeconds admission (--default-not-ready/unreachable-toleration-seconds)
    default_not_ready_toleration_seconds: int = 300
    default_unreachable_toleration_seconds: int = 300
    #: --enable-admission-plugins / --disable-admission-plugins: changes to upstream's default-enabled set
    enable_admission_plugins: list[str] = field(default_factory=list)
    disable_admission_plugins: list[str] = field(default_factory=list)
    #: --admission-control-config-file: the AdmissionConfiguration with the plugins' own configuration
    admission_control_config_file: str = ""
    #: Where ComponentStatus probes the scheduler and the controller-manager (upstream: fixed local ports).
    scheduler_health_url: str = DEFAULT_SCHEDULER_URL
    controller_manager_health_url: str = DEFAULT_CONTROLLER_MANAGER_URL
    #: --client-ca-file, published for extension apiservers in kube-system/extension-apiserver-authentication.
    client_ca_file: str = ""
    #: The --requestheader-* flags: how extension apiservers trust the front proxy (this apiserver).
    requestheader: RequestHeaderOptions = field(default_factory=RequestHeaderOptions)
    #: --proxy-client-cert-file / --proxy-client-key-file: what this apiserver shows extension apiservers.
    proxy_client_cert_file: str = ""
    proxy_client_key_file: str = ""


class APIServer:
    """Owns the etcd connection, the watch cache and the stores; started by the app's lifespan."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.catalog = Catalog()
        root = options.etcd_prefix.rstrip("/") + "/"
        transformers = load_config(options.encryption_provider_config, root) \
            if options.encryption_provider_config else None
        self.etcd = EtcdStore(options.etcd_servers, lease_reuse_seconds=options.lease_reuse_duration_seconds,
                              tls=options.etcd_tls, transformers=transformers)
        self.cache = WatchCache(self.etcd, root)
        self.admission = chain.build(
            chain.enabled_plugins(options.enable_admission_plugins, options.disable_admission_plugins),
            PluginConfig(self.cache, root, self.catalog,
                         not_ready_toleration_seconds=options.default_not_ready_toleration_seconds,
                         unreachable_toleration_seconds=options.default_unreachable_toleration_seconds,
                         plugin_configs=admission_config.load(options.admission_control_config_file)))
        log.info("admission plugins", mutating=",".join(p.name for p in self.admission.mutating),
                 validating=",".join(p.name for p in self.admission.validating))
        self.ctx = ServerContext(
            etcd=self.etcd,
            cache=self.cache,
            root=root,
            service_cidr=ipaddress.IPv4Network(options.service_cluster_ip_range, strict=False),
            node_port_range=options.service_node_port_range,
            admission=self.admission,
            event_ttl=options.event_ttl,
        )
        self.tokens = TokenIssuer.load(
            options.service_account_signing_key_file, options.service_account_key_files,
            options.service_account_key_dir, options.service_account_issuer, options.api_audiences,
        )
        self.stores: dict[tuple[str, str, str], RESTStore] = {}
        for res in self.catalog:
            self.stores[(res.group, res.version, res.plural)] = RESTStore(res, strategy_for(res), self.ctx)
        self.kubernetes_service = self._kubernetes_service_controller()
        self.aggregator = Aggregator(
            self.catalog, self.store("apiregistration.k8s.io", "v1", "apiservices"),
            lambda namespace, name: self.store("", "v1", "services").get(namespace, name),
            self.store("discovery.k8s.io", "v1", "endpointslices").cache,
            ProxyClientConfig(options.proxy_client_cert_file, options.proxy_client_key_file))
        self.on_catalog_change: Callable[[], None] = lambda: None
        self.custom_resources = CustomResourceServer(self.catalog, self.stores, self.ctx,
                                                     lambda: self.on_catalog_change())
        self.ready = False
        self.bootstrapped = False
        self.etcd_healthy = False
        self._tasks: list[asyncio.Task[None]] = []

    def store(self, group: str, version: str, plural: str) -> RESTStore:
        return self.stores[(group, version, plural)]

    def _kubernetes_service_controller(self) -> KubernetesServiceController:
        service_ip = str(next(self.ctx.service_cidr.hosts()))
        reconciler = None
        if self.options.endpoint_reconciler_type == "lease":
            address_type = "IPv4" if self.ctx.service_cidr.version == 4 else "IPv6"
            adapter = EndpointsAdapter(self.store("", "v1", "endpoints"),
                                       self.store("discovery.k8s.io", "v1", "endpointslices"),
                                       KUBERNETES_NAMESPACE, KUBERNETES_SERVICE, address_type)
            reconciler = LeaseEndpointReconciler(
                adapter, MasterLeases(self.etcd, self.ctx.root, self.options.endpoint_reconciler_ttl))
        config = ServiceConfig(service_ip=service_ip, public_ip=self.options.advertise_address,
                               public_port=self.options.secure_port,
                               interval=self.options.endpoint_reconciler_ttl * 2 / 3)
        return KubernetesServiceController(config, self.store("", "v1", "services"), reconciler)

    async def start(self) -> None:
        await self.etcd.start()
        await self.cache.start()
        self.custom_resources.start()
        self.etcd_healthy = True
        self.ready = True
        await self._bootstrap()
        await self.kubernetes_service.start()
        self.aggregator.start()
        self.bootstrapped = True
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._compact_loop()))
        self._tasks.append(loop.create_task(self._health_loop()))
        self._tasks.append(loop.create_task(flowcontrol_status_loop(*self._flowcontrol_stores())))
        self._tasks.append(loop.create_task(admissionpolicy_status_loop(
            self.store("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"), self.catalog)))
        log.info("apiserver ready", etcd=self.etcd.endpoint, revision=self.cache.revision)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.kubernetes_service.stop()
        await self.aggregator.stop()
        await self.custom_resources.stop()
        await self.cache.stop()
        await self.etcd.close()

    def _flowcontrol_stores(self) -> tuple[RESTStore, RESTStore]:
        group = "flowcontrol.apiserver.k8s.io"
        return self.store(group, "v1", "flowschemas"), self.store(group, "v1", "prioritylevelconfigurations")

    async def _ensure(self, store: RESTStore, namespace: str | None, obj: dict[str, object]) -> None:
        """Create `obj` unless it exists; every replica runs this, so losing the race is fine."""
        name = str(obj["metadata"]["name"])  # type: ignore[index]
        try:
            await store.get(namespace, name)
            return
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
        try:
            await store.create(namespace, obj, WriteOptions())
        except errors.StatusError as exc:
            if exc.code != 409:
                raise

    async def _bootstrap(self) -> None:
        """System namespaces and priority classes, as upstream's bootstrap controller, and the default RBAC
        policy, as its rbac/bootstrap-roles hook. The `kubernetes` Service is `kubernetes_service`'s."""
        namespaces = self.store("", "v1", "namespaces")
        for name in SYSTEM_NAMESPACES:
            await self._ensure(namespaces, None, {"metadata": {"name": name}})
        for name, (value, description) in SYSTEM_PRIORITY_CLASSES.items():
            await self._ensure(self.store("scheduling.k8s.io", "v1", "priorityclasses"), None, {
                "metadata": {"name": name}, "value": value, "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            })
        await ensure_bootstrap_configuration(*self._flowcontrol_stores())
        for apiservice in local_apiservices(self.catalog):
            await self._ensure(self.store("apiregistration.k8s.io", "v1", "apiservices"), None, apiservice)
        await ensure_authentication_configmap(self.store("", "v1", "configmaps"), self.options.client_ca_file,
                                              self.options.requestheader)
        await ensure_bootstrap_policy(Stores(
            roles=self.store("rbac.authorization.k8s.io", "v1", "roles"),
            cluster_roles=self.store("rbac.authorization.k8s.io", "v1", "clusterroles"),
            role_bindings=self.store("rbac.authorization.k8s.io", "v1", "rolebindings"),
            cluster_role_bindings=self.store("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
        ))

    async def _compact_loop(self) -> None:
        """Compact etcd history every interval to the revision seen one interval earlier, like upstream.

        Several apiservers coordinate through a bookkeeping key so only one compacts per interval.
        """
        key = self.cache.compact_key
        previous = 0
        while True:
            await asyncio.sleep(self.options.compaction_interval)
            try:
                current = await self.etcd.current_revision()
                if previous:
                    kv = await self.etcd.get(key)
                    last = int(orjson.loads(kv.value)) if kv else 0
                    if previous > last:
                        await self.etcd.put_raw(key, str(previous).encode())
                        await self.etcd.compact(previous)
                        log.info("compacted etcd", revision=previous)
                previous = current
            except Exception:  # noqa: BLE001 - compaction is best effort and retried next interval
                log.exception("compaction failed")

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(5)
            try:
                await asyncio.wait_for(self.etcd.current_revision(), 5)
                self.etcd_healthy = True
            except Exception:  # noqa: BLE001 - any failure means unhealthy
                self.etcd_healthy = False

"""Controllers by name, like upstream's NewControllerDescriptors.

A controller module in controller_manager/controllers/ plugs in by exposing:

    NAME: str                       # the name --controllers uses, e.g. "replicaset"
    def new(ctx: ControllerContext) -> Controller   # build it; ask ctx for informers here
    DISABLED_BY_DEFAULT: bool = False               # optional; "*" then leaves it off
    def add_flags(parser) -> None                   # optional; its own command-line flags

and the Controller it returns has `async def run(self) -> None`, which runs until cancelled.
Modules are found by scanning the package, so a new file is all it takes; a controller of several
files is a subpackage whose __init__ exposes the same names.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import controller_manager.controllers as package


class Controller(Protocol):
    async def run(self) -> None: ...


@dataclass(frozen=True)
class Descriptor:
    name: str
    module: ModuleType
    disabled_by_default: bool

    @property
    def new(self) -> Callable[[Any], Controller]:
        return self.module.new  # type: ignore[no-any-return]


#: upstream names we accept in --controllers without running anything for them (yet)
KNOWN_UNIMPLEMENTED = (
    "route", "service",
    "cloud-node-lifecycle", "attachdetach", "persistentvolume-expander",
    "ephemeral-volume", "serviceaccount-token",
    "storage-version-gc", "resourceclaim", "legacy-serviceaccount-token-cleaner", "validatingadmissionpolicy-status",
    "service-cidr-controller", "storageversion-migrator",
    "selinux-warning-controller",
)


#: the kube-system service account each controller runs as under --use-service-account-credentials, the
#: names upstream's controller start functions pass to ClientBuilder.ClientOrDie; each is bound to its
#: `system:controller:<account>` role. A controller without one (pyk8s's own) names its module NAME.
SERVICE_ACCOUNTS: dict[str, str] = {
    "bootstrapsigner": "bootstrap-signer",
    "clusterrole-aggregation": "clusterrole-aggregation-controller",
    "cronjob": "cronjob-controller",
    "csrapproving": "certificate-controller",
    "csrcleaner": "certificate-controller",
    "csrsigning": "certificate-controller",
    "daemonset": "daemon-set-controller",
    "deployment": "deployment-controller",
    "disruption": "disruption-controller",
    "endpoint": "endpoint-controller",
    "endpointslice": "endpointslice-controller",
    "endpointslicemirroring": "endpointslicemirroring-controller",
    "garbagecollector": "generic-garbage-collector",
    "horizontalpodautoscaling": "horizontal-pod-autoscaler",
    "job": "job-controller",
    "namespace": "namespace-controller",
    "nodeipam": "node-controller",
    "nodelifecycle": "node-controller",
    "persistentvolume-binder": "persistent-volume-binder",
    "podgc": "pod-garbage-collector",
    "pv-protection": "pv-protection-controller",
    "pvc-protection": "pvc-protection-controller",
    "replicaset": "replicaset-controller",
    "replicationcontroller": "replication-controller",
    "resourcequota": "resourcequota-controller",
    "root-ca-cert-publisher": "root-ca-cert-publisher",
    "serviceaccount": "service-account-controller",
    "statefulset": "statefulset-controller",
    "taint-eviction-controller": "taint-eviction-controller",
    "tokencleaner": "token-cleaner",
    "ttl-after-finished": "ttl-after-finished-controller",
}


def service_account(name: str) -> str:
    """The service account the controller `name` runs as."""
    return SERVICE_ACCOUNTS.get(name, name)


def discover() -> dict[str, Descriptor]:
    """Every controller module in the controllers package, by NAME."""
    found: dict[str, Descriptor] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        name = getattr(module, "NAME", None)
        if isinstance(name, str) and callable(getattr(module, "new", None)):
            found[name] = Descriptor(name, module, bool(getattr(module, "DISABLED_BY_DEFAULT", False)))
    return found


def enabled(requested: list[str], available: dict[str, Descriptor]) -> list[str]:
    """Upstream's IsControllerEnabled over the whole list: `foo` on, `-foo` off, `*` the defaults.

    An explicit name beats `*`, whichever order they come in.
    """
    explicit_on = {c for c in requested if c and not c.startswith("-") and c != "*"}
    explicit_off = {c[1:] for c in requested if c.startswith("-")}
    star = "*" in requested
    unknown = (explicit_on | explicit_off) - set(available) - set(KNOWN_UNIMPLEMENTED)
    if unknown:
        raise ValueError(f"{', '.join(sorted(unknown))} is not in the list of known controllers")
    out = []
    for name, desc in sorted(available.items()):
        if name in explicit_off:
            continue
        if name in explicit_on or (star and not desc.disabled_by_default):
            out.append(name)
    return out

"""The admission chain: which plugins run, in which order, and on which resources.

The order is upstream's recommended one (pkg/kubeapiserver/options/plugins.go, `AllOrderedPlugins`),
whatever order the flags name plugins in. `--enable-admission-plugins` adds to upstream's
default-enabled set and `--disable-admission-plugins` takes from it, as upstream's
`enabledPluginNames` does. Each resource store asks once for its own view of the chain, so a write
only walks the plugins that handle its resource, operation and subresource.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from apiserver.admission.alwayspullimages import AlwaysPullImages
from apiserver.admission.defaultingressclass import DefaultIngressClass
from apiserver.admission.defaultstorageclass import DefaultStorageClass
from apiserver.admission.defaulttolerationseconds import DefaultTolerationSeconds
from apiserver.admission.interfaces import (
    OPERATIONS,
    Attributes,
    MutationInterface,
    Obj,
    Plugin,
    PluginConfig,
    ValidationInterface,
)
from apiserver.admission.limitranger import LimitRanger
from apiserver.admission.namespacelifecycle import NamespaceLifecycle
from apiserver.admission.noderestriction import NodeRestriction
from apiserver.admission.podsecurity.plugin import PodSecurity
from apiserver.admission.policy.validating import ValidatingAdmissionPolicy
from apiserver.admission.priority import Priority
from apiserver.admission.resourcequota import ResourceQuota
from apiserver.admission.runtimeclass import RuntimeClass
from apiserver.admission.serviceaccount import ServiceAccount
from apiserver.admission.storageobjectinuseprotection import StorageObjectInUseProtection
from apiserver.admission.webhook.mutating import MutatingAdmissionWebhook
from apiserver.admission.webhook.validating import ValidatingAdmissionWebhook
from services.api.catalog import Resource
from services.auth.identity import UserInfo

P = TypeVar("P", bound=Plugin)

#: upstream's AllOrderedPlugins (v1.32): every plugin name it knows, in the order plugins run
ORDERED_PLUGINS: tuple[str, ...] = (
    "AlwaysAdmit",
    "NamespaceAutoProvision",
    "NamespaceLifecycle",
    "NamespaceExists",
    "LimitPodHardAntiAffinityTopology",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "ImagePolicyWebhook",
    "PodSecurity",
    "PodNodeSelector",
    "Priority",
    "DefaultTolerationSeconds",
    "PodTolerationRestriction",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DenyServiceExternalIPs",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "AlwaysDeny",
)

#: upstream's default-enabled plugins (the complement of DefaultOffAdmissionPlugins)
DEFAULT_ON: frozenset[str] = frozenset({
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "DefaultStorageClass", "PersistentVolumeClaimResize",
    "DefaultTolerationSeconds", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook", "ResourceQuota",
    "StorageObjectInUseProtection", "Priority", "TaintNodesByCondition", "RuntimeClass", "CertificateApproval",
    "CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction", "DefaultIngressClass",
    "PodSecurity", "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy",
})

#: the plugins pyk8s implements, by name
REGISTERED: dict[str, type[Plugin]] = {p.name: p for p in (
    NamespaceLifecycle, LimitRanger, ServiceAccount, NodeRestriction, AlwaysPullImages, PodSecurity, Priority,
    DefaultTolerationSeconds, DefaultStorageClass, StorageObjectInUseProtection, RuntimeClass, DefaultIngressClass,
    ResourceQuota, MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook,
)}


class UnknownPlugin(ValueError):
    """A flag names a plugin that cannot be enabled; the message is the usage error."""


def check_flags(enable: Sequence[str], disable: Sequence[str]) -> None:
    """Raise UnknownPlugin as upstream's AdmissionOptions.Validate does. Disabling a plugin upstream
    knows but pyk8s lacks is allowed (it is off either way); enabling one is refused."""
    for name in enable:
        if name not in ORDERED_PLUGINS:
            raise UnknownPlugin(f'enable-admission-plugins plugin "{name}" is unknown')
        if name not in REGISTERED:
            raise UnknownPlugin(f'enable-admission-plugins plugin "{name}" is not implemented by pyk8s')
    for name in disable:
        if name not in ORDERED_PLUGINS:
            raise UnknownPlugin(f'disable-admission-plugins plugin "{name}" is unknown')
    both = sorted(set(enable) & set(disable))
    if both:
        raise UnknownPlugin(f"[{' '.join(both)}] in enable-admission-plugins and disable-admission-plugins "
                            "overlapped")


def enabled_plugins(enable: Iterable[str] = (), disable: Iterable[str] = ()) -> list[str]:
    """The names of the plugins that run, in upstream's order."""
    on = (DEFAULT_ON - set(disable)) | set(enable)
    return [name for name in ORDERED_PLUGINS if name in on and name in REGISTERED]


def _select(res: Resource, plugins: Sequence[P]) -> dict[tuple[str, str], tuple[P, ...]]:
    """For each (operation, subresource) of `res` that any of `plugins` acts on, those plugins in order."""
    mine = [p for p in plugins if p.handles(res)]
    table = {(op, sub): tuple(p for p in mine if op in p.operations and (p.subresources is None
                                                                            or sub in p.subresources))
             for op in OPERATIONS for sub in ("", *res.subresources)}
    return {key: found for key, found in table.items() if found}


class ResourceChain:
    """The plugins one resource's writes go through, precomputed per (operation, subresource)."""

    __slots__ = ("resource", "_mutating", "_validating")

    def __init__(self, res: Resource, mutating: Sequence[MutationInterface],
                 validating: Sequence[ValidationInterface]) -> None:
        self.resource = res
        self._mutating = _select(res, mutating)
        self._validating = _select(res, validating)

    def mutators(self, operation: str, subresource: str = "") -> tuple[MutationInterface, ...]:
        """The mutating plugins such a write goes through, in order."""
        return self._mutating.get((operation, subresource), ())

    def validators(self, operation: str, subresource: str = "") -> tuple[ValidationInterface, ...]:
        """The validating plugins such a write goes through, in order."""
        return self._validating.get((operation, subresource), ())

    async def admit(self, operation: str, obj: Obj | None, old: Obj | None, subresource: str, dry_run: bool,
                    user: UserInfo | None = None) -> None:
        """Run the mutating plugins on `obj` (changed in place); a StatusError refuses the write."""
        plugins = self._mutating.get((operation, subresource))
        if plugins:
            a = Attributes(self.resource, operation, obj, old, subresource, dry_run, user)
            for plugin in plugins:
                await plugin.admit(a)
            if a.reinvocation.requested:
                # Upstream's reinvoker: once a webhook changed the object, every mutating plugin runs once
                # more on it (the webhooks only where their reinvocationPolicy is IfNeeded).
                a.reinvocation.again = True
                for plugin in plugins:
                    await plugin.admit(a)

    async def validate(self, operation: str, obj: Obj | None, old: Obj | None, subresource: str, dry_run: bool,
                       user: UserInfo | None = None) -> None:
        """Run the validating plugins on the defaulted, valid `obj` (None on DELETE, where `old` is the object
        being deleted); a StatusError refuses the write."""
        plugins = self._validating.get((operation, subresource))
        if plugins:
            a = Attributes(self.resource, operation, obj, old, subresource, dry_run, user)
            for plugin in plugins:
                await plugin.validate(a)


class AdmissionChain:
    """The enabled plugins in upstream's order, split into the mutating and the validating phase."""

    def __init__(self, plugins: Sequence[Plugin]) -> None:
        order = {name: i for i, name in enumerate(ORDERED_PLUGINS)}
        self.plugins = sorted(plugins, key=lambda p: order[p.name])
        self.mutating = [p for p in self.plugins if isinstance(p, MutationInterface)]
        self.validating = [p for p in self.plugins if isinstance(p, ValidationInterface)]

    def for_resource(self, res: Resource) -> ResourceChain:
        return ResourceChain(res, self.mutating, self.validating)


def build(names: Iterable[str], config: PluginConfig) -> AdmissionChain:
    """The chain of the named plugins (run in upstream's order, whatever order `names` has)."""
    return AdmissionChain([REGISTERED[name](config) for name in names])

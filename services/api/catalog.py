"""The resource catalog: one entry per served resource, the data that drives routing,
discovery, OpenAPI, storage keys and `kubectl api-resources`.

Custom resources join the same catalog at run time, so built-in and custom
resources go through the same code paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_ONLY_VERBS: tuple[str, ...] = ("get", "list", "watch")


@dataclass(frozen=True)
class Scale:
    """Where a resource keeps the numbers its autoscaling/v1 Scale subresource shows."""

    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    label_selector: str = ".status.selector"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    storage_path: str = ""
    storage_version: str = ""
    scale: Scale | None = None
    custom: bool = False
    #: A custom resource's openAPIV3Schema, additionalPrinterColumns and selectableFields (JSON paths).
    schema: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    printer_columns: tuple[dict[str, Any], ...] | None = field(default=None, hash=False, compare=False)
    selectable_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def group_resource(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def etcd_prefix(self) -> str:
        """Key prefix below the storage root, e.g. `services/specs` or `deployments`."""
        if self.storage_path:
            return self.storage_path
        if self.custom:
            return f"{self.group}/{self.plural}"
        return self.plural

    @property
    def stored_version(self) -> str:
        return self.storage_version or self.version

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _r(
    gv: str,
    kind: str,
    plural: str,
    namespaced: bool = True,
    short: Iterable[str] = (),
    cats: Iterable[str] = (),
    sub: Iterable[str] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
    path: str = "",
    storage_version: str = "",
    scale: Scale | None = None,
) -> Resource:
    group, _, version = gv.rpartition("/")
    return Resource(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=tuple(short),
        categories=tuple(cats),
        verbs=verbs,
        subresources=tuple(sub),
        storage_path=path,
        storage_version=storage_version,
        scale=scale,
    )


_APPS_SCALE = Scale()
_RC_SCALE = Scale(label_selector=".spec.selector")

BUILTIN: tuple[Resource, ...] = (
    _r("v1", "Namespace", "namespaces", False, ["ns"], sub=["status", "finalize"],
       verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _r("v1", "Pod", "pods", True, ["po"], ["all"],
       sub=["status", "binding", "eviction", "log", "exec", "attach", "portforward", "proxy", "ephemeralcontainers"]),
    _r("v1", "Binding", "bindings", True, verbs=("create",)),
    _r("v1", "Service", "services", True, ["svc"], ["all"], sub=["status", "proxy"],
       path="services/specs"),
    _r("v1", "Endpoints", "endpoints", True, ["ep"], path="services/endpoints"),
    _r("v1", "Node", "nodes", False, ["no"], sub=["status", "proxy"], path="minions"),
    _r("v1", "ConfigMap", "configmaps", True, ["cm"]),
    _r("v1", "Secret", "secrets", True),
    _r("v1", "ServiceAccount", "serviceaccounts", True, ["sa"], sub=["token"]),
    _r("v1", "Event", "events", True, ["ev"]),
    _r("v1", "PersistentVolume", "persistentvolumes", False, ["pv"], sub=["status"]),
    _r("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], sub=["status"]),
    _r("v1", "LimitRange", "limitranges", True, ["limits"]),
    _r("v1", "ResourceQuota", "resourcequotas", True, ["quota"], sub=["status"]),
    _r("v1", "ReplicationController", "replicationcontrollers", True, ["rc"], ["all"],
       sub=["status", "scale"], path="controllers", scale=_RC_SCALE),
    _r("v1", "PodTemplate", "podtemplates", True),
    _r("v1", "ComponentStatus", "componentstatuses", False, ["cs"], verbs=("get", "list")),
    _r("apps/v1", "Deployment", "deployments", True, ["deploy"], ["all"], sub=["status", "scale"],
       scale=_APPS_SCALE),
    _r("apps/v1", "ReplicaSet", "replicasets", True, ["rs"], ["all"], sub=["status", "scale"],
       scale=_APPS_SCALE),
    _r("apps/v1", "StatefulSet", "statefulsets", True, ["sts"], ["all"], sub=["status", "scale"],
       scale=_APPS_SCALE),
    _r("apps/v1", "DaemonSet", "daemonsets", True, ["ds"], ["all"], sub=["status"]),
    _r("apps/v1", "ControllerRevision", "controllerrevisions", True),
    _r("batch/v1", "Job", "jobs", True, cats=["all"], sub=["status"]),
    _r("batch/v1", "CronJob", "cronjobs", True, ["cj"], ["all"], sub=["status"]),
    _r("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, ["hpa"], ["all"],
       sub=["status"]),
    _r("autoscaling/v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, ["hpa"], ["all"],
       sub=["status"], storage_version="v2"),
    _r("coordination.k8s.io/v1", "Lease", "leases", True),
    _r("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", True),
    _r("events.k8s.io/v1", "Event", "events", True, ["ev"], storage_version="v1"),
    _r("rbac.authorization.k8s.io/v1", "Role", "roles", True),
    _r("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
    _r("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    _r("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _r("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"], sub=["status"]),
    _r("networking.k8s.io/v1", "Ingress", "ingresses", True, ["ing"], sub=["status"], path="ingress"),
    _r("networking.k8s.io/v1", "IngressClass", "ingressclasses", False),
    _r("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True, ["netpol"]),
    _r("storage.k8s.io/v1", "StorageClass", "storageclasses", False, ["sc"]),
    _r("storage.k8s.io/v1", "CSIDriver", "csidrivers", False),
    _r("storage.k8s.io/v1", "CSIStorageCapacity", "csistoragecapacities", True),
    _r("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False, ["pc"]),
    _r("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False,
       cats=["api-extensions"]),
    _r("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations",
       False, cats=["api-extensions"]),
    _r("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False,
       cats=["api-extensions"], sub=["status"]),
    _r("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings",
       False, cats=["api-extensions"]),
    _r("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False),
    _r("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "flowschemas", False, sub=["status"]),
    _r("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration", "prioritylevelconfigurations", False,
       sub=["status"]),
    _r("authentication.k8s.io/v1", "TokenReview", "tokenreviews", False, verbs=("create",)),
    _r("authentication.k8s.io/v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=("create",)),
    _r("authorization.k8s.io/v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False, verbs=("create",)),
    _r("authorization.k8s.io/v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False, verbs=("create",)),
    _r("authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", False, verbs=("create",)),
    _r("authorization.k8s.io/v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", True,
       verbs=("create",)),
    _r("certificates.k8s.io/v1", "CertificateSigningRequest", "certificatesigningrequests", False, ["csr"],
       sub=["status", "approval"]),
    _r("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False,
       ["crd", "crds"], ["api-extensions"], sub=["status"], path="apiextensions.k8s.io/customresourcedefinitions"),
    _r("apiregistration.k8s.io/v1", "APIService", "apiservices", False, cats=["api-extensions"], sub=["status"],
       path="apiregistration.k8s.io/apiservices"),
)

# The preferred version of each group, newest first where a group serves several.
GROUP_ORDER: tuple[str, ...] = (
    "", "apiregistration.k8s.io", "apps", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
    "autoscaling", "batch", "policy", "rbac.authorization.k8s.io", "storage.k8s.io", "admissionregistration.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "networking.k8s.io", "scheduling.k8s.io", "node.k8s.io", "flowcontrol.apiserver.k8s.io", "certificates.k8s.io",
    "apiextensions.k8s.io",
)


class Catalog:
    """Lookup of served resources by group/version/plural, by kind and by short name."""

    def __init__(self, resources: Iterable[Resource] = BUILTIN) -> None:
        self._by_gvr: dict[tuple[str, str, str], Resource] = {}
        self._order: list[Resource] = []
        for res in resources:
            self.add(res)

    def add(self, res: Resource) -> None:
        key = (res.group, res.version, res.plural)
        if key not in self._by_gvr:
            self._order.append(res)
        else:
            self._order = [res if (r.group, r.version, r.plural) == key else r for r in self._order]
        self._by_gvr[key] = res

    def remove(self, group: str, version: str, plural: str) -> None:
        res = self._by_gvr.pop((group, version, plural), None)
        if res is not None:
            self._order.remove(res)

    def get(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_gvr.get((group, version, plural))

    def __iter__(self) -> Iterator[Resource]:
        return iter(list(self._order))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        for res in self._order:
            if res.api_version == api_version and res.kind == kind:
                return res
        return None

    def groups(self) -> list[str]:
        """Groups in upstream's discovery order; custom groups after the built-in ones."""
        seen = {r.group for r in self._order}
        ordered = [g for g in GROUP_ORDER if g in seen]
        ordered += sorted(seen - set(ordered))
        return ordered

    def versions(self, group: str) -> list[str]:
        """Served versions of a group, preferred first."""
        versions: list[str] = []
        for res in self._order:
            if res.group == group and res.version not in versions:
                versions.append(res.version)
        return versions

    def in_group_version(self, group: str, version: str) -> list[Resource]:
        return [r for r in self._order if r.group == group and r.version == version]

    def storage_peers(self, res: Resource) -> list[Resource]:
        """Every served version that shares `res`'s etcd keys (e.g. both Event APIs)."""
        return [r for r in self._order if r.etcd_prefix == res.etcd_prefix]

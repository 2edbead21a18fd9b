"""Upstream's default RBAC policy (bootstrappolicy, as of v1.32 with default feature gates) and its
reconciliation at apiserver start, as upstream's `rbac/bootstrap-roles` post-start hook does it.

Reconciliation only ever adds: missing objects are created, objects annotated
`rbac.authorization.kubernetes.io/autoupdate: "true"` (or not annotated) get the rules, selectors,
subjects, labels and annotations they lack, and what users added stays. An object annotated
`"false"` is left alone. A binding whose roleRef differs is recreated, since roleRef is immutable.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from apiserver.registry.store import DeleteOptions, ListOptions, RESTStore, WriteOptions
from apiserver.storage.cache import Entry
from services.api import errors

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
API_VERSION = f"{RBAC_GROUP}/v1"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
FIELD_MANAGER = "kube-apiserver"
CONTROLLER_PREFIX = "system:controller:"

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
READ_WRITE = READ + WRITE
EVENTS_GROUPS = ("", "events.k8s.io")

#: the aggregated roles and the role each used to be before aggregation (upstream's ClusterRolesToAggregate)
AGGREGATED = {"admin": "system:aggregate-to-admin", "edit": "system:aggregate-to-edit",
              "view": "system:aggregate-to-view"}


def rule(verbs: Iterable[str], groups: Iterable[str] = (), resources: Iterable[str] = (),
         names: Iterable[str] = (), urls: Iterable[str] = ()) -> Obj:
    """A PolicyRule with its lists sorted, as upstream's rule builder leaves them."""
    out: Obj = {"verbs": sorted(set(verbs))}
    if urls:
        out["nonResourceURLs"] = sorted(set(urls))
        return out
    out["apiGroups"] = sorted(set(groups))
    out["resources"] = sorted(set(resources))
    if names:
        out["resourceNames"] = sorted(set(names))
    return out


def events_rule() -> Obj:
    return rule(("create", "update", "patch"), EVENTS_GROUPS, ("events",))


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "labels": {**BOOTSTRAP_LABEL, **(labels or {})}, "annotations": {AUTOUPDATE: "true"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _role(kind: str, name: str, rules: list[Obj], namespace: str | None = None,
          labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": _meta(name, namespace, labels), "rules": rules}


def _aggregated(name: str, to: str, labels: dict[str, str] | None = None) -> Obj:
    role = _role("ClusterRole", name, [], labels=labels)
    role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {f"{RBAC_GROUP}/aggregate-to-{to}": "true"}}]}
    return role


def user(name: str) -> Obj:
    return {"kind": "User", "apiGroup": RBAC_GROUP, "name": name}


def group(name: str) -> Obj:
    return {"kind": "Group", "apiGroup": RBAC_GROUP, "name": name}


def service_account(namespace: str, name: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def _binding(kind: str, name: str, role_kind: str, role: str, subjects: list[Obj],
             namespace: str | None = None) -> Obj:
    out: Obj = {"apiVersion": API_VERSION, "kind": kind, "metadata": _meta(name, namespace),
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role}}
    if subjects:
        out["subjects"] = subjects
    return out


def _cluster_binding(role: str, *subjects: Obj) -> Obj:
    return _binding("ClusterRoleBinding", role, "ClusterRole", role, list(subjects))


def _signer_approver(name: str, signer: str) -> Obj:
    return _role("ClusterRole", f"system:certificates.k8s.io:{name}",
                 [rule(("approve",), ("certificates.k8s.io",), ("signers",), names=(signer,))])


def node_rules() -> list[Obj]:
    """Upstream's NodeRules(): what every kubelet may do, the `system:node` role's rules, which the Node
    authorizer applies to nodes for the resources it does not scope per node."""
    return [
        rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
        rule(("create",), ("authorization.k8s.io",), ("subjectaccessreviews", "localsubjectaccessreviews")),
        rule(READ, ("",), ("services",)),
        rule(("create", "get", "list", "watch"), ("",), ("nodes",)),
        rule(("update", "patch"), ("",), ("nodes/status",)),
        rule(("update", "patch"), ("",), ("nodes",)),
        events_rule(),
        rule(READ, ("",), ("pods",)),
        rule(("create", "delete"), ("",), ("pods",)),
        rule(("update", "patch"), ("",), ("pods/status",)),
        rule(("create",), ("",), ("pods/eviction",)),
        rule(READ, ("",), ("secrets", "configmaps")),
        rule(("get",), ("",), ("persistentvolumeclaims", "persistentvolumes")),
        rule(("get",), ("",), ("endpoints",)),
        rule(("create", "get", "list", "watch"), ("certificates.k8s.io",), ("certificatesigningrequests",)),
        rule(("delete", "create", "get", "update", "patch"), ("coordination.k8s.io",), ("leases",)),
        rule(("get",), ("storage.k8s.io",), ("volumeattachments",)),
        rule(("create",), ("",), ("serviceaccounts/token",)),
        rule(("get", "update", "patch"), ("",), ("persistentvolumeclaims/status",)),
        rule(READ, ("storage.k8s.io",), ("csidrivers",)),
        rule(("get", "create", "update", "patch", "delete"), ("storage.k8s.io",), ("csinodes",)),
        rule(READ, ("node.k8s.io",), ("runtimeclasses",)),
    ]


def cluster_roles() -> list[Obj]:
    """Upstream's ClusterRoles(): the user-facing and system roles."""
    write = ("create", "delete", "deletecollection", "patch", "update")
    pods_sub = ("pods/attach", "pods/exec", "pods/portforward", "pods/proxy")
    return [
        _role("ClusterRole", "cluster-admin", [rule(("*",), ("*",), ("*",)), rule(("*",), urls=("*",))]),
        _role("ClusterRole", "system:discovery", [rule(("get",), urls=(
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
            "/version", "/version/"))]),
        _role("ClusterRole", "system:monitoring", [rule(("get",), urls=(
            "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"))]),
        _role("ClusterRole", "system:basic-user", [
            rule(("create",), ("authorization.k8s.io",), ("selfsubjectaccessreviews", "selfsubjectrulesreviews")),
            rule(("create",), ("authentication.k8s.io",), ("selfsubjectreviews",)),
        ]),
        _role("ClusterRole", "system:public-info-viewer", [rule(("get",), urls=(
            "/healthz", "/livez", "/readyz", "/version", "/version/"))]),
        _aggregated("admin", "admin"),
        _aggregated("edit", "edit", {f"{RBAC_GROUP}/aggregate-to-admin": "true"}),
        _aggregated("view", "view", {f"{RBAC_GROUP}/aggregate-to-edit": "true"}),
        _role("ClusterRole", "system:aggregate-to-admin", [
            rule(("create",), ("authorization.k8s.io",), ("localsubjectaccessreviews",)),
            rule(READ_WRITE, (RBAC_GROUP,), ("roles", "rolebindings")),
        ], labels={f"{RBAC_GROUP}/aggregate-to-admin": "true"}),
        _role("ClusterRole", "system:aggregate-to-edit", [
            rule(READ, ("",), (*pods_sub, "secrets", "services/proxy")),
            rule(("impersonate",), ("",), ("serviceaccounts",)),
            rule(write, ("",), ("pods", *pods_sub)),
            rule(("create",), ("",), ("pods/eviction",)),
            rule(write, ("",), ("replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
                                "services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets")),
            rule(("create",), ("",), ("serviceaccounts/token",)),
            rule(write, EVENTS_GROUPS, ("events",)),
            rule(write, ("apps",), ("statefulsets", "statefulsets/scale", "daemonsets", "deployments",
                                    "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale")),
            rule(write, ("autoscaling",), ("horizontalpodautoscalers",)),
            rule(write, ("batch",), ("jobs", "cronjobs")),
            rule(write, ("extensions",), ("daemonsets", "deployments", "deployments/scale", "deployments/rollback",
                                          "ingresses", "replicasets", "replicasets/scale",
                                          "replicationcontrollers/scale", "networkpolicies")),
            rule(write, ("policy",), ("poddisruptionbudgets",)),
            rule(write, ("networking.k8s.io",), ("ingresses", "networkpolicies")),
            rule(READ_WRITE, ("coordination.k8s.io",), ("leases",)),
        ], labels={f"{RBAC_GROUP}/aggregate-to-edit": "true"}),
        _role("ClusterRole", "system:aggregate-to-view", [
            rule(READ, ("",), ("pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
                               "services", "services/status", "endpoints", "persistentvolumeclaims",
                               "persistentvolumeclaims/status", "configmaps")),
            rule(READ, ("",), ("limitranges", "resourcequotas", "bindings", "pods/log", "pods/status",
                               "resourcequotas/status", "namespaces/status", "replicationcontrollers/status")),
            rule(READ, ("",), ("namespaces",)),
            rule(READ, EVENTS_GROUPS, ("events",)),
            rule(READ, ("discovery.k8s.io",), ("endpointslices",)),
            rule(READ, ("apps",), ("controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
                                   "daemonsets", "daemonsets/status", "deployments", "deployments/status",
                                   "deployments/scale", "replicasets", "replicasets/status", "replicasets/scale")),
            rule(READ, ("autoscaling",), ("horizontalpodautoscalers", "horizontalpodautoscalers/status")),
            rule(READ, ("batch",), ("jobs", "cronjobs", "cronjobs/status", "jobs/status")),
            rule(READ, ("extensions",), ("daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                                         "deployments/status", "ingresses", "ingresses/status", "replicasets",
                                         "replicasets/scale", "replicasets/status", "replicationcontrollers/scale",
                                         "networkpolicies")),
            rule(READ, ("policy",), ("poddisruptionbudgets", "poddisruptionbudgets/status")),
            rule(READ, ("networking.k8s.io",), ("ingresses", "ingresses/status", "networkpolicies")),
        ], labels={f"{RBAC_GROUP}/aggregate-to-view": "true"}),
        _role("ClusterRole", "system:kube-aggregator", [rule(READ, ("",), ("services", "endpoints"))]),
        _role("ClusterRole", "system:node", node_rules()),
        _role("ClusterRole", "system:node-problem-detector", [
            rule(("get",), ("",), ("nodes",)),
            rule(("patch",), ("",), ("nodes/status",)),
            events_rule(),
        ]),
        _role("ClusterRole", "system:kubelet-api-admin", [
            rule(READ, ("",), ("nodes",)),
            rule(("proxy",), ("",), ("nodes",)),
            rule(("*",), ("",), ("nodes/proxy", "nodes/metrics", "nodes/log", "nodes/stats")),
            rule(("*",), ("",), ("nodes/pods", "nodes/healthz", "nodes/configz")),
        ]),
        _role("ClusterRole", "system:node-bootstrapper", [
            rule(("create", "get", "list", "watch"), ("certificates.k8s.io",), ("certificatesigningrequests",)),
        ]),
        _role("ClusterRole", "system:auth-delegator", [
            rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
            rule(("create",), ("authorization.k8s.io",), ("subjectaccessreviews",)),
        ]),
        _role("ClusterRole", "system:kube-controller-manager", [
            events_rule(),
            rule(("create",), ("coordination.k8s.io",), ("leases",)),
            rule(("get", "update"), ("coordination.k8s.io",), ("leases",), names=("kube-controller-manager",)),
            rule(("create",), ("",), ("secrets", "serviceaccounts")),
            rule(("delete",), ("",), ("secrets",)),
            rule(("get",), ("",), ("namespaces", "secrets", "serviceaccounts", "configmaps")),
            rule(("update",), ("",), ("secrets", "serviceaccounts")),
            rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
            rule(("create",), ("authorization.k8s.io",), ("subjectaccessreviews",)),
            rule(("list", "watch"), ("*",), ("*",)),
            rule(("create",), ("",), ("serviceaccounts/token",)),
        ]),
        _role("ClusterRole", "system:kube-dns", [rule(("list", "watch"), ("",), ("endpoints", "services"))]),
        _role("ClusterRole", "system:persistent-volume-provisioner", [
            rule(("get", "list", "watch", "create", "delete"), ("",), ("persistentvolumes",)),
            rule(("get", "list", "watch", "update"), ("",), ("persistentvolumeclaims",)),
            rule(READ, ("storage.k8s.io",), ("storageclasses",)),
            rule(("watch",), ("",), ("events",)),
            events_rule(),
        ]),
        _role("ClusterRole", "system:kube-scheduler", [
            events_rule(),
            rule(("create",), ("coordination.k8s.io",), ("leases",)),
            rule(("get", "update"), ("coordination.k8s.io",), ("leases",), names=("kube-scheduler",)),
            rule(READ, ("",), ("nodes",)),
            rule(("get", "list", "watch", "delete"), ("",), ("pods",)),
            rule(("create",), ("",), ("pods/binding", "bindings")),
            rule(("patch", "update"), ("",), ("pods/status",)),
            rule(READ, ("",), ("replicationcontrollers", "services")),
            rule(READ, ("apps", "extensions"), ("replicasets",)),
            rule(READ, ("apps",), ("statefulsets",)),
            rule(READ, ("policy",), ("poddisruptionbudgets",)),
            rule(READ, ("",), ("persistentvolumeclaims", "persistentvolumes")),
            rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
            rule(("create",), ("authorization.k8s.io",), ("subjectaccessreviews",)),
            rule(READ, ("storage.k8s.io",), ("csinodes",)),
            rule(READ, ("",), ("namespaces",)),
            rule(READ, ("storage.k8s.io",), ("csidrivers",)),
            rule(READ, ("storage.k8s.io",), ("csistoragecapacities",)),
        ]),
        _role("ClusterRole", "system:volume-scheduler", [
            rule(("get", "list", "watch", "update", "patch"), ("",), ("persistentvolumes",)),
            rule(READ, ("storage.k8s.io",), ("storageclasses",)),
            rule(("get", "list", "watch", "update", "patch"), ("",), ("persistentvolumeclaims",)),
        ]),
        _role("ClusterRole", "system:node-proxier", [
            rule(("list", "watch"), ("",), ("services", "endpoints")),
            rule(READ, ("",), ("nodes",)),
            events_rule(),
            rule(("list", "watch"), ("discovery.k8s.io",), ("endpointslices",)),
        ]),
        _role("ClusterRole", "system:service-account-issuer-discovery", [rule(("get",), urls=(
            "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks",
            "/openid/v1/jwks/"))]),
        _role("ClusterRole", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", [
            rule(("create",), ("certificates.k8s.io",), ("certificatesigningrequests/nodeclient",))]),
        _role("ClusterRole", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", [
            rule(("create",), ("certificates.k8s.io",), ("certificatesigningrequests/selfnodeclient",))]),
        _signer_approver("legacy-unknown-approver", "kubernetes.io/legacy-unknown"),
        _signer_approver("kubelet-serving-approver", "kubernetes.io/kubelet-serving"),
        _signer_approver("kube-apiserver-client-approver", "kubernetes.io/kube-apiserver-client"),
        _signer_approver("kube-apiserver-client-kubelet-approver", "kubernetes.io/kube-apiserver-client-kubelet"),
    ]


#: the verbs a controller writes its objects' status with: upstream's send UpdateStatus, pyk8s's send
#: merge patches of `status` alone (no conflict on a concurrent spec change), so their roles grant both
STATUS_WRITE = ("update", "patch")

#: upstream's controller roles for the controllers pyk8s runs: service account name -> rules
_CONTROLLER_RULES: dict[str, list[Obj]] = {
    "certificate-controller": [
        rule(("delete", "get", "list", "watch"), ("certificates.k8s.io",), ("certificatesigningrequests",)),
        rule(("update",), ("certificates.k8s.io",),
             ("certificatesigningrequests/status", "certificatesigningrequests/approval")),
        rule(("approve",), ("certificates.k8s.io",), ("signers",),
             names=("kubernetes.io/kube-apiserver-client-kubelet",)),
        rule(("sign",), ("certificates.k8s.io",), ("signers",), names=(
            "kubernetes.io/legacy-unknown", "kubernetes.io/kube-apiserver-client",
            "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving")),
        rule(("create",), ("authorization.k8s.io",), ("subjectaccessreviews",)),
        events_rule(),
    ],
    "clusterrole-aggregation-controller": [
        rule(("escalate", "get", "list", "watch", "update", "patch"), (RBAC_GROUP,), ("clusterroles",)),
    ],
    "cronjob-controller": [
        rule(("get", "list", "watch", "update"), ("batch",), ("cronjobs",)),
        rule(("get", "list", "watch", "create", "update", "delete", "patch"), ("batch",), ("jobs",)),
        rule(STATUS_WRITE, ("batch",), ("cronjobs/status",)),
        rule(("update",), ("batch",), ("cronjobs/finalizers",)),
        rule(("list", "delete"), ("",), ("pods",)),
        events_rule(),
    ],
    "daemon-set-controller": [
        rule(READ, ("extensions", "apps"), ("daemonsets",)),
        rule(STATUS_WRITE, ("extensions", "apps"), ("daemonsets/status",)),
        rule(("update",), ("extensions", "apps"), ("daemonsets/finalizers",)),
        rule(("list", "watch"), ("",), ("nodes",)),
        rule(("list", "watch", "create", "delete", "patch"), ("",), ("pods",)),
        rule(("create",), ("",), ("pods/binding",)),
        rule(("get", "list", "watch", "create", "delete", "update", "patch"), ("apps",), ("controllerrevisions",)),
        events_rule(),
    ],
    "deployment-controller": [
        # pyk8s's controller patches a deployment's revision annotations where upstream's updates it
        rule(("get", "list", "watch", "update", "patch"), ("extensions", "apps"), ("deployments",)),
        rule(STATUS_WRITE, ("extensions", "apps"), ("deployments/status",)),
        rule(("update",), ("extensions", "apps"), ("deployments/finalizers",)),
        rule(("get", "list", "watch", "create", "update", "patch", "delete"), ("apps", "extensions"), ("replicasets",)),
        rule(("get", "list", "watch", "update"), ("",), ("pods",)),
        events_rule(),
    ],
    "disruption-controller": [
        rule(("get", "list", "watch"), ("extensions", "apps"), ("deployments",)),
        rule(("get", "list", "watch"), ("apps", "extensions"), ("replicasets",)),
        rule(("get", "list", "watch"), ("",), ("replicationcontrollers",)),
        rule(("get", "list", "watch"), ("policy",), ("poddisruptionbudgets",)),
        rule(("get", "list", "watch"), ("apps",), ("statefulsets",)),
        rule(("update",), ("policy",), ("poddisruptionbudgets/status",)),
        rule(("get",), ("*",), ("*/scale",)),
        rule(("patch", "update"), ("",), ("pods/status",)),
        events_rule(),
    ],
    "endpoint-controller": [
        rule(READ, ("",), ("services", "pods")),
        rule(("get", "list", "create", "update", "delete"), ("",), ("endpoints",)),
        rule(("create",), ("",), ("endpoints/restricted",)),
        events_rule(),
    ],
    "endpointslice-controller": [
        rule(READ, ("",), ("services", "pods", "nodes")),
        rule(("update",), ("",), ("services/finalizers",)),
        rule(("get", "list", "create", "update", "delete"), ("discovery.k8s.io",), ("endpointslices",)),
        events_rule(),
    ],
    "endpointslicemirroring-controller": [
        rule(READ, ("",), ("services", "endpoints")),
        rule(("update",), ("",), ("services/finalizers",)),
        rule(("update",), ("",), ("endpoints/finalizers",)),
        rule(("get", "list", "create", "update", "delete"), ("discovery.k8s.io",), ("endpointslices",)),
        events_rule(),
    ],
    "generic-garbage-collector": [
        rule(("get", "list", "watch", "patch", "update", "delete"), ("*",), ("*",)),
        events_rule(),
    ],
    "job-controller": [
        rule(("get", "list", "watch", "update", "patch"), ("batch",), ("jobs",)),
        rule(STATUS_WRITE, ("batch",), ("jobs/status",)),
        rule(("update",), ("batch",), ("jobs/finalizers",)),
        rule(("list", "watch", "create", "delete", "patch"), ("",), ("pods",)),
        events_rule(),
    ],
    "namespace-controller": [
        rule(("get", "list", "watch", "delete"), ("",), ("namespaces",)),
        rule(("update",), ("",), ("namespaces/finalize",)),
        rule(STATUS_WRITE, ("",), ("namespaces/status",)),
        rule(("get", "list", "delete", "deletecollection"), ("*",), ("*",)),
    ],
    "node-controller": [
        rule(("get", "list", "update", "delete", "patch"), ("",), ("nodes",)),
        rule(("patch", "update"), ("",), ("nodes/status",)),
        rule(("patch", "update"), ("",), ("pods/status",)),
        rule(("list", "delete"), ("",), ("pods",)),
        events_rule(),
    ],
    "persistent-volume-binder": [
        rule(("get", "list", "watch", "update", "create", "delete"), ("",), ("persistentvolumes",)),
        rule(("update",), ("",), ("persistentvolumes/status",)),
        rule(("get", "list", "watch", "update"), ("",), ("persistentvolumeclaims",)),
        rule(("update",), ("",), ("persistentvolumeclaims/status",)),
        rule(("get", "list", "watch", "create", "delete"), ("",), ("pods",)),
        rule(("get", "list", "watch"), ("storage.k8s.io",), ("storageclasses",)),
        rule(("get",), ("",), ("secrets",)),
        rule(("list", "watch"), ("",), ("nodes",)),
        events_rule(),
    ],
    "pod-garbage-collector": [
        rule(("list", "watch", "delete"), ("",), ("pods",)),
        rule(("get", "list"), ("",), ("nodes",)),
        rule(("patch",), ("",), ("pods/status",)),
    ],
    "pv-protection-controller": [
        rule(("get", "list", "watch", "update"), ("",), ("persistentvolumes",)),
        events_rule(),
    ],
    "pvc-protection-controller": [
        rule(("get", "list", "watch", "update"), ("",), ("persistentvolumeclaims",)),
        rule(("list", "watch", "get"), ("",), ("pods",)),
        events_rule(),
    ],
    "horizontal-pod-autoscaler": [
        rule(("get", "list", "watch"), ("autoscaling",), ("horizontalpodautoscalers",)),
        rule(("update",), ("autoscaling",), ("horizontalpodautoscalers/status",)),
        rule(("get", "update"), ("*",), ("*/scale",)),
        rule(("list",), ("",), ("pods",)),
        rule(("list",), ("metrics.k8s.io",), ("pods",)),
        rule(("get", "list"), ("custom.metrics.k8s.io",), ("*",)),
        rule(("get", "list"), ("external.metrics.k8s.io",), ("*",)),
        events_rule(),
    ],
    "replicaset-controller": [
        rule(("get", "list", "watch", "update"), ("apps", "extensions"), ("replicasets",)),
        rule(STATUS_WRITE, ("apps", "extensions"), ("replicasets/status",)),
        rule(("update",), ("apps", "extensions"), ("replicasets/finalizers",)),
        rule(("list", "watch", "patch", "create", "delete"), ("",), ("pods",)),
        events_rule(),
    ],
    "replication-controller": [
        rule(("get", "list", "watch", "update"), ("",), ("replicationcontrollers",)),
        rule(STATUS_WRITE, ("",), ("replicationcontrollers/status",)),
        rule(("update",), ("",), ("replicationcontrollers/finalizers",)),
        rule(("list", "watch", "patch", "create", "delete"), ("",), ("pods",)),
        events_rule(),
    ],
    "resourcequota-controller": [
        rule(("list", "watch"), ("*",), ("*",)),
        rule(("update",), ("",), ("resourcequotas/status",)),
        events_rule(),
    ],
    "root-ca-cert-publisher": [
        rule(("create", "update"), ("",), ("configmaps",)),
        events_rule(),
    ],
    "service-account-controller": [
        rule(("create",), ("",), ("serviceaccounts",)),
        events_rule(),
    ],
    "statefulset-controller": [
        rule(("list", "watch"), ("",), ("pods",)),
        rule(READ, ("apps",), ("statefulsets",)),
        rule(STATUS_WRITE, ("apps",), ("statefulsets/status",)),
        rule(("update",), ("apps",), ("statefulsets/finalizers",)),
        rule(("get", "create", "delete", "update", "patch"), ("",), ("pods",)),
        rule(("get", "create", "delete", "update", "patch", "list", "watch"), ("apps",), ("controllerrevisions",)),
        rule(("get", "create"), ("",), ("persistentvolumeclaims",)),
        events_rule(),
        rule(("update", "delete"), ("",), ("persistentvolumeclaims",)),
    ],
    "taint-eviction-controller": [
        rule(("patch", "update"), ("",), ("pods/status",)),
        rule(("list", "delete"), ("",), ("pods",)),
        events_rule(),
    ],
    "ttl-after-finished-controller": [
        rule(("get", "list", "watch", "delete"), ("batch",), ("jobs",)),
        events_rule(),
    ],
}


def controller_roles() -> list[Obj]:
    """Upstream's ControllerRoles() for the controllers pyk8s has, each `system:controller:<account>`."""
    return [_role("ClusterRole", CONTROLLER_PREFIX + account, rules)
            for account, rules in sorted(_CONTROLLER_RULES.items())]


def cluster_role_bindings() -> list[Obj]:
    """Upstream's ClusterRoleBindings() plus one binding per controller role to its kube-system account."""
    bindings = [
        _cluster_binding("cluster-admin", group("system:masters")),
        _cluster_binding("system:monitoring", group("system:monitoring")),
        _cluster_binding("system:discovery", group("system:authenticated")),
        _cluster_binding("system:basic-user", group("system:authenticated")),
        _cluster_binding("system:public-info-viewer", group("system:authenticated"),
                         group("system:unauthenticated")),
        _cluster_binding("system:node-proxier", user("system:kube-proxy")),
        _cluster_binding("system:kube-controller-manager", user("system:kube-controller-manager")),
        _cluster_binding("system:kube-dns", service_account("kube-system", "kube-dns")),
        _cluster_binding("system:kube-scheduler", user("system:kube-scheduler")),
        _cluster_binding("system:volume-scheduler", user("system:kube-scheduler")),
        _cluster_binding("system:node"),
        _cluster_binding("system:service-account-issuer-discovery", group("system:serviceaccounts")),
    ]
    bindings.extend(_cluster_binding(CONTROLLER_PREFIX + account, service_account("kube-system", account))
                    for account in sorted(_CONTROLLER_RULES))
    return bindings


def namespace_roles() -> list[Obj]:
    """Upstream's NamespaceRoles(): the bootstrap Roles of kube-system and kube-public."""
    cm = ("configmaps",)
    return [
        _role("Role", "extension-apiserver-authentication-reader",
              [rule(READ, ("",), cm, names=("extension-apiserver-authentication",))], "kube-system"),
        _role("Role", "system::leader-locking-kube-controller-manager", [
            rule(("watch",), ("",), cm),
            rule(("get", "update"), ("",), cm, names=("kube-controller-manager",)),
        ], "kube-system"),
        _role("Role", "system::leader-locking-kube-scheduler", [
            rule(("watch",), ("",), cm),
            rule(("get", "update"), ("",), cm, names=("kube-scheduler",)),
        ], "kube-system"),
        _role("Role", CONTROLLER_PREFIX + "bootstrap-signer", [rule(READ, ("",), ("secrets",))], "kube-system"),
        _role("Role", CONTROLLER_PREFIX + "cloud-provider",
              [rule(("create", "get", "list", "watch"), ("",), cm)], "kube-system"),
        _role("Role", CONTROLLER_PREFIX + "token-cleaner",
              [rule(("delete", "get", "list", "watch"), ("",), ("secrets",)), events_rule()], "kube-system"),
        _role("Role", CONTROLLER_PREFIX + "bootstrap-signer", [
            rule(READ, ("",), cm),
            rule(("update",), ("",), cm, names=("cluster-info",)),
            events_rule(),
        ], "kube-public"),
    ]


def namespace_role_bindings() -> list[Obj]:
    """Upstream's NamespaceRoleBindings()."""
    def bind(namespace: str, name: str, role: str, *subjects: Obj) -> Obj:
        return _binding("RoleBinding", name, "Role", role, list(subjects), namespace)

    def controller(namespace: str, account: str) -> Obj:
        return bind(namespace, CONTROLLER_PREFIX + account, CONTROLLER_PREFIX + account,
                    service_account("kube-system", account))

    return [
        bind("kube-system", "system::extension-apiserver-authentication-reader",
             "extension-apiserver-authentication-reader",
             user("system:kube-controller-manager"), user("system:kube-scheduler")),
        bind("kube-system", "system::leader-locking-kube-controller-manager",
             "system::leader-locking-kube-controller-manager",
             user("system:kube-controller-manager"), service_account("kube-system", "kube-controller-manager")),
        bind("kube-system", "system::leader-locking-kube-scheduler", "system::leader-locking-kube-scheduler",
             user("system:kube-scheduler"), service_account("kube-system", "kube-scheduler")),
        controller("kube-system", "bootstrap-signer"),
        controller("kube-system", "cloud-provider"),
        controller("kube-system", "token-cleaner"),
        controller("kube-public", "bootstrap-signer"),
    ]


# -- what kubeadm adds for joining machines ---------------------------------------------------------

#: the group kubeadm's default bootstrap tokens carry (`pyk8s token create` gives it too)
KUBEADM_NODE_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
CLUSTER_INFO_READER = "kubeadm:bootstrap-signer-clusterinfo"


def kubeadm_cluster_role_bindings() -> list[Obj]:
    """kubeadm's bootstrap-token bindings: tokens of the default group may post CSRs and have their node
    client CSRs auto-approved; nodes may renew their own client certificates."""
    return [
        _binding("ClusterRoleBinding", "kubeadm:kubelet-bootstrap", "ClusterRole", "system:node-bootstrapper",
                 [group(KUBEADM_NODE_TOKEN_GROUP)]),
        _binding("ClusterRoleBinding", "kubeadm:node-autoapprove-bootstrap", "ClusterRole",
                 "system:certificates.k8s.io:certificatesigningrequests:nodeclient", [group(KUBEADM_NODE_TOKEN_GROUP)]),
        _binding("ClusterRoleBinding", "kubeadm:node-autoapprove-certificate-rotation", "ClusterRole",
                 "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", [group("system:nodes")]),
    ]


def kubeadm_namespace_roles() -> list[Obj]:
    """The cluster-info ConfigMap is public: a joining machine reads it before it has credentials."""
    return [_role("Role", CLUSTER_INFO_READER, [rule(("get",), ("",), ("configmaps",), names=("cluster-info",))],
                  "kube-public")]


def kubeadm_namespace_role_bindings() -> list[Obj]:
    return [_binding("RoleBinding", CLUSTER_INFO_READER, "Role", CLUSTER_INFO_READER,
                     [user("system:anonymous"), group("system:unauthenticated")], "kube-public")]


# -- reconciliation ----------------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    """A rule or subject with empty lists and empty strings dropped, so nil and empty compare equal."""
    return {k: v for k, v in (value or {}).items() if v not in (None, "", [], {})}


def _has(items: list[Obj], item: Obj) -> bool:
    wanted = _norm(item)
    return any(_norm(i) == wanted for i in items)


def _atoms(r: Obj) -> list[tuple[str, ...]]:
    """A rule broken into single-verb, single-resource pieces, as upstream's BreakdownRule."""
    verbs = r.get("verbs") or []
    if r.get("nonResourceURLs"):
        return [("url", u, v) for u in r["nonResourceURLs"] for v in verbs]
    names = r.get("resourceNames") or [""]
    return [("res", g, res, n, v) for g in r.get("apiGroups") or [] for res in r.get("resources") or []
            for n in names for v in verbs]


def _matches(have: list[str], want: str) -> bool:
    return want in have or "*" in have


def _url_matches(have: list[str], want: str) -> bool:
    return any(h == want or h == "*" or (h.endswith("*") and want.startswith(h[:-1])) for h in have)


def _covers_atom(r: Obj, atom: tuple[str, ...]) -> bool:
    verbs = r.get("verbs") or []
    if atom[0] == "url":
        return _matches(verbs, atom[2]) and _url_matches(r.get("nonResourceURLs") or [], atom[1])
    _, g, res, name, verb = atom
    if r.get("nonResourceURLs") or not _matches(verbs, verb) or not _matches(r.get("apiGroups") or [], g):
        return False
    resources = r.get("resources") or []
    if not (_matches(resources, res) or ("/" in res and f"*/{res.split('/', 1)[1]}" in resources)):
        return False
    names = r.get("resourceNames") or []
    return not names or (name != "" and name in names)


def uncovered(owner: list[Obj], wanted: list[Obj]) -> list[Obj]:
    """The rules of `wanted` that `owner` does not fully grant (upstream's validation.Covers)."""
    return [r for r in wanted if not all(any(_covers_atom(o, a) for o in owner) for a in _atoms(r))]


def protected(obj: Obj) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(AUTOUPDATE) == "false"


def _merge_meta(existing: Obj, expected: Obj) -> bool:
    """Add the expected labels and annotations the existing object lacks; existing values win."""
    changed = False
    meta = existing.setdefault("metadata", {})
    for field in ("labels", "annotations"):
        have = meta.get(field) or {}
        merged = {**(expected["metadata"].get(field) or {}), **have}
        if merged != have:
            meta[field] = merged
            changed = True
    return changed


def reconcile_role(existing: Obj, expected: Obj) -> Obj | None:
    """The existing role with what it lacks added, or None when it needs no write (or is protected)."""
    if protected(existing):
        return None
    result = copy.deepcopy(existing)
    changed = _merge_meta(result, expected)
    missing = uncovered(result.get("rules") or [], expected.get("rules") or [])
    if missing:
        result["rules"] = [*(result.get("rules") or []), *missing]
        changed = True
    wanted = expected.get("aggregationRule")
    if wanted is not None:
        have = result.get("aggregationRule") or {}
        selectors = list(have.get("clusterRoleSelectors") or [])
        extra = [s for s in wanted.get("clusterRoleSelectors") or [] if not _has(selectors, s)]
        if extra or not have:
            result["aggregationRule"] = {**have, "clusterRoleSelectors": selectors + extra}
            changed = True
    return result if changed else None


def reconcile_binding(existing: Obj, expected: Obj) -> Obj | None:
    """The existing binding with its missing subjects added, or None when nothing is to be written.

    A changed roleRef cannot be written in place; the caller recreates the binding then.
    """
    if protected(existing):
        return None
    result = copy.deepcopy(existing)
    changed = _merge_meta(result, expected)
    if _norm(result.get("roleRef")) != _norm(expected.get("roleRef")):
        result["roleRef"] = expected["roleRef"]
        changed = True
    subjects = list(result.get("subjects") or [])
    missing = [s for s in expected.get("subjects") or [] if not _has(subjects, s)]
    if missing:
        result["subjects"] = subjects + missing
        changed = True
    return result if changed else None


@dataclass
class Stores:
    roles: RESTStore
    cluster_roles: RESTStore
    role_bindings: RESTStore
    cluster_role_bindings: RESTStore


async def _existing(store: RESTStore) -> dict[tuple[str, str], Obj]:
    items, _ = await store.list(None, ListOptions())
    out: dict[tuple[str, str], Obj] = {}
    for item in items:
        obj = store.out(item.obj) if isinstance(item, Entry) else item
        meta = obj["metadata"]
        out[(meta.get("namespace") or "", meta["name"])] = obj
    return out


async def _write(store: RESTStore, current: Obj | None, expected: Obj, binding: bool) -> None:
    """Create `expected`, or fold it into `current`; a lost race is retried from a fresh read."""
    namespace = expected["metadata"].get("namespace")
    name = expected["metadata"]["name"]
    opts = WriteOptions(field_manager=FIELD_MANAGER)
    for _ in range(5):
        try:
            if current is None:
                await store.create(namespace, copy.deepcopy(expected), opts)
                log.debug("created bootstrap RBAC object", kind=expected["kind"], name=name, namespace=namespace)
                return
            result = (reconcile_binding if binding else reconcile_role)(current, expected)
            if result is None:
                return
            if binding and _norm(current.get("roleRef")) != _norm(result.get("roleRef")):
                await store.delete(namespace, name, DeleteOptions(precondition_uid=current["metadata"].get("uid")))
                result["metadata"] = {k: v for k, v in result["metadata"].items()
                                      if k not in ("uid", "resourceVersion", "creationTimestamp", "managedFields")}
                await store.create(namespace, result, opts)
            else:
                await store.update(namespace, name, result, opts)
            log.info("reconciled bootstrap RBAC object", kind=expected["kind"], name=name, namespace=namespace)
            return
        except errors.StatusError as exc:
            if exc.code not in (404, 409):
                raise
        try:
            current = await store.get(namespace, name)
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
            current = None
    log.warning("gave up reconciling bootstrap RBAC object", kind=expected["kind"], name=name)


async def _prime_aggregated(store: RESTStore, existing: dict[tuple[str, str], Obj]) -> None:
    """Keep the rules of a pre-aggregation admin/edit/view role: copy them to its system:aggregate-to-* role
    before the role turns into an aggregated one (upstream's primeAggregatedClusterRoles)."""
    for name, target in AGGREGATED.items():
        role = existing.get(("", name))
        if role is None or role.get("aggregationRule") is not None or ("", target) in existing:
            continue
        copied = {"apiVersion": API_VERSION, "kind": "ClusterRole",
                  "metadata": {"name": target, "labels": dict(role["metadata"].get("labels") or {}),
                               "annotations": dict(role["metadata"].get("annotations") or {})},
                  "rules": copy.deepcopy(role.get("rules") or [])}
        await _write(store, None, copied, binding=False)
        existing[("", target)] = copied


async def _reconcile_kind(store: RESTStore, expected: list[Obj], binding: bool) -> None:
    existing = await _existing(store)
    if not binding and store.res.plural == "clusterroles":
        await _prime_aggregated(store, existing)
    pending = []
    for obj in expected:
        current = existing.get((obj["metadata"].get("namespace") or "", obj["metadata"]["name"]))
        if current is None or (reconcile_binding if binding else reconcile_role)(current, obj) is not None:
            pending.append(_write(store, current, obj, binding))
    await asyncio.gather(*pending)


async def ensure_bootstrap_policy(stores: Stores) -> None:
    """Upstream's rbac/bootstrap-roles hook: one list per kind, writes only where something is missing."""
    await _reconcile_kind(stores.cluster_roles, cluster_roles() + controller_roles(), binding=False)
    await _reconcile_kind(stores.cluster_role_bindings, cluster_role_bindings() + kubeadm_cluster_role_bindings(),
                          binding=True)
    await _reconcile_kind(stores.roles, namespace_roles() + kubeadm_namespace_roles(), binding=False)
    await _reconcile_kind(stores.role_bindings, namespace_role_bindings() + kubeadm_namespace_role_bindings(),
                          binding=True)

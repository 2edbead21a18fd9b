"""The identities of what `pyk8s up` adds to upstream's components, each least-privilege, none of them
system:masters: cluster DNS runs as kubeadm's `kube-system/coredns` service account with kubeadm's
`system:coredns` role, and the hostpath provisioner (a controller of ours, so upstream's bootstrap
policy has no role for it) as `kube-system/pyk8s-hostpath-provisioner` with the rights
local-path-provisioner's role grants, the service load-balancer as `kube-system/pyk8s-service-lb` with
k3s's ServiceLB's, the network-policy agents as `kube-system/pyk8s-network-policy`, read-only, and the
metrics server as `kube-system/metrics-server` with its manifest's rights.

DNS is a host process, not a pod, so nothing projects a token for it: `up` asks the TokenRequest
API for one and writes it next to the kubeconfig that names it (`tokenFile`, reread as it changes);
every `up` replaces it.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from deploy import nodes
from deploy.bootstrap import token_kubeconfig
from deploy.state import State
from services.runtime import pki

RBAC = "/apis/rbac.authorization.k8s.io/v1"
NAMESPACE = "kube-system"
DNS_ACCOUNT = "coredns"
DNS_ROLE = "system:coredns"
DNS_KUBECONFIG = "cluster-dns"
#: a year: the token is replaced on every `up`, and an add-on must not lose the API between two
ADDON_TOKEN_SECONDS = 365 * 24 * 3600
PROVISIONER_ACCOUNT = "pyk8s-hostpath-provisioner"
PROVISIONER_ROLE = "pyk8s:hostpath-provisioner"
SERVICE_LB_ACCOUNT = "pyk8s-service-lb"
SERVICE_LB_ROLE = "pyk8s:service-lb"
NETWORK_POLICY_ACCOUNT = "pyk8s-network-policy"
NETWORK_POLICY_ROLE = "pyk8s:network-policy"
NETWORK_POLICY_KUBECONFIG = "network-policy"
METRICS_ACCOUNT = "metrics-server"
METRICS_ROLE = "system:metrics-server"
METRICS_KUBECONFIG = "metrics-server"


def _rule(verbs: tuple[str, ...], group: str, *resources: str) -> dict[str, Any]:
    return {"verbs": list(verbs), "apiGroups": [group], "resources": list(resources)}


DNS_RULES = [_rule(("list", "watch"), "", "endpoints", "services", "pods", "namespaces"),
             _rule(("list", "watch"), "discovery.k8s.io", "endpointslices")]
PROVISIONER_RULES = [
    _rule(("get", "list", "watch"), "", "nodes"),
    _rule(("get", "list", "watch", "update", "patch"), "", "persistentvolumeclaims"),
    _rule(("get", "list", "watch", "create", "update", "patch", "delete"), "", "persistentvolumes"),
    _rule(("get", "list", "watch", "create", "delete"), "", "pods"),
    _rule(("get", "list", "watch"), "storage.k8s.io", "storageclasses"),
    _rule(("create", "update", "patch"), "", "events"),
    _rule(("create", "update", "patch"), "events.k8s.io", "events"),
]

#: what k3s's ServiceLB controller's role grants, less the DaemonSets it runs (ours answers in kube-proxy)
SERVICE_LB_RULES = [
    _rule(("get", "list", "watch"), "", "services", "nodes"),
    _rule(("update", "patch"), "", "services/status"),
    _rule(("list", "watch"), "discovery.k8s.io", "endpointslices"),
    _rule(("create", "update", "patch"), "", "events"),
    _rule(("create", "update", "patch"), "events.k8s.io", "events"),
]
#: what kube-router's network-policy controller reads
NETWORK_POLICY_RULES = [
    _rule(("list", "watch"), "", "pods", "namespaces"),
    _rule(("list", "watch"), "networking.k8s.io", "networkpolicies"),
]

#: metrics-server's manifest: its system:metrics-server role, plus what its system:auth-delegator and
#: extension-apiserver-authentication-reader bindings give it (delegated authn/authz, the front-proxy CA)
METRICS_RULES = [
    _rule(("get",), "", "nodes/metrics"),
    _rule(("get", "list", "watch"), "", "pods", "nodes"),
    _rule(("create",), "authentication.k8s.io", "tokenreviews"),
    _rule(("create",), "authorization.k8s.io", "subjectaccessreviews"),
    {**_rule(("get", "list", "watch"), "", "configmaps"), "resourceNames": ["extension-apiserver-authentication"]},
]


class AccountError(RuntimeError):
    """The apiserver refused one of the writes that set an identity up."""


async def _call(http: httpx.AsyncClient, method: str, url: str, body: Any = None) -> httpx.Response:
    return await http.request(method, url, content=None if body is None else orjson.dumps(body),
                              headers={"Content-Type": "application/json"}, timeout=10.0)


async def _ensure(http: httpx.AsyncClient, base: str, body: dict[str, Any]) -> None:
    """Create `body` under `base`, or make the existing object's fields ours (kept otherwise)."""
    created = await _call(http, "POST", base, body)
    if created.status_code == 409:
        url = f"{base}/{body['metadata']['name']}"
        current = await _call(http, "GET", url)
        if current.status_code == 200:
            live = current.json()
            wanted = {**live, **{k: v for k, v in body.items() if k != "metadata"}}
            if wanted != live:
                created = await _call(http, "PUT", url, wanted)
            else:
                return
        else:
            created = current
    if created.status_code >= 300:
        raise AccountError(f"writing {base}/{body['metadata']['name']}: {created.status_code} {created.text}")


async def _bound_account(state: State, http: httpx.AsyncClient, account: str, role: str,
                         rules: list[dict[str, Any]]) -> None:
    """A kube-system service account and a ClusterRole of `rules` bound to it."""
    api = state.server
    await _ensure(http, f"{api}/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": NAMESPACE}})
    await _ensure(http, f"{api}{RBAC}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1",
                                                       "kind": "ClusterRole", "metadata": {"name": role},
                                                       "rules": rules})
    await _ensure(http, f"{api}{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]})


def token_file(state: State, kubeconfig: str) -> Any:
    return state.component_kubeconfig(kubeconfig).with_suffix(".token")


async def _token_kubeconfig(state: State, http: httpx.AsyncClient, account: str, kubeconfig: str) -> None:
    """A host process is not a pod, so nothing projects a token for it: ask for one and write it next to
    the kubeconfig that names it."""
    url = f"{state.server}/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token"
    answer = await _call(http, "POST", url, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                             "spec": {"expirationSeconds": ADDON_TOKEN_SECONDS}})
    if answer.status_code != 201:
        raise AccountError(f"requesting a token for {NAMESPACE}/{account}: {answer.status_code} {answer.text}")
    path = token_file(state, kubeconfig)
    pki.write_file(path, answer.json()["status"]["token"].encode(), 0o600)
    config = token_kubeconfig(state.server, state.pki, f"system:serviceaccount:{NAMESPACE}:{account}", path)
    pki.write_file(state.component_kubeconfig(kubeconfig), orjson.dumps(config), 0o600)


async def prepare_dns(state: State, http: httpx.AsyncClient) -> None:
    """The DNS Service and its slice, then DNS's own account, token and kubeconfig."""
    await nodes.ensure_kube_dns(state, http)
    await _bound_account(state, http, DNS_ACCOUNT, DNS_ROLE, DNS_RULES)
    await _token_kubeconfig(state, http, DNS_ACCOUNT, DNS_KUBECONFIG)


async def prepare_network_policy(state: State, http: httpx.AsyncClient) -> None:
    """The network-policy agents' account (one for all nodes: they only read), token and kubeconfig."""
    await _bound_account(state, http, NETWORK_POLICY_ACCOUNT, NETWORK_POLICY_ROLE, NETWORK_POLICY_RULES)
    await _token_kubeconfig(state, http, NETWORK_POLICY_ACCOUNT, NETWORK_POLICY_KUBECONFIG)


async def prepare_metrics_server(state: State, http: httpx.AsyncClient) -> None:
    """The metrics server's account, token and kubeconfig; it scrapes kubelets with the same token."""
    await _bound_account(state, http, METRICS_ACCOUNT, METRICS_ROLE, METRICS_RULES)
    await _token_kubeconfig(state, http, METRICS_ACCOUNT, METRICS_KUBECONFIG)


async def prepare_controller_manager(state: State, http: httpx.AsyncClient) -> None:
    """The default StorageClass and IngressClass, and the roles of pyk8s's own controllers (the hostpath
    provisioner, the service load-balancer), which upstream's bootstrap policy has none for."""
    await nodes.ensure_default_classes(state, http)
    await _bound_account(state, http, PROVISIONER_ACCOUNT, PROVISIONER_ROLE, PROVISIONER_RULES)
    await _bound_account(state, http, SERVICE_LB_ACCOUNT, SERVICE_LB_ROLE, SERVICE_LB_RULES)

"""kubeadm's `bootstrap-token` phase for pyk8s clusters: the kube-public/cluster-info ConfigMap, whose
`kubeconfig` holds the cluster's CA and the URL joining machines reach the apiserver at. It is
readable anonymously (the kubeadm:bootstrap-signer-clusterinfo Role of the bootstrap policy), and the
bootstrapsigner controller signs it with each bootstrap token, so a machine that knows a token can
trust what it read.
"""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import orjson
import yaml

from services.auth import bootstraptoken as bt
from services.client import gvr

SECRETS = gvr("v1", "secrets")


def cluster_info_kubeconfig(server: str, ca_file: Path) -> str:
    """A kubeconfig with one cluster and nothing else, as kubeadm writes into cluster-info."""
    body = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "", "cluster": {
            "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(), "server": server}}],
        "contexts": None, "current-context": "", "users": None,
    }
    return yaml.safe_dump(body, sort_keys=False)


async def ensure_cluster_info(http: httpx.AsyncClient, api: str, server: str, ca_file: Path) -> None:
    """Create cluster-info, or rewrite its kubeconfig when the CA or URL changed (signatures are the
    bootstrapsigner's and are left for it to redo)."""
    url = f"{api}/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps"
    content = cluster_info_kubeconfig(server, ca_file)
    headers = {"Content-Type": "application/json"}
    current = await http.get(f"{url}/{bt.CLUSTER_INFO}", timeout=10.0)
    if current.status_code == 404:
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": bt.CLUSTER_INFO, "namespace": bt.CLUSTER_INFO_NAMESPACE},
                "data": {bt.KUBECONFIG_KEY: content}}
        response = await http.post(url, content=orjson.dumps(body), headers=headers, timeout=10.0)
    elif current.status_code == 200:
        body = current.json()
        data = body.get("data") or {}
        if data.get(bt.KUBECONFIG_KEY) == content:
            return
        body["data"] = {**data, bt.KUBECONFIG_KEY: content}
        response = await http.put(f"{url}/{bt.CLUSTER_INFO}", content=orjson.dumps(body), headers=headers,
                                  timeout=10.0)
    else:
        response = current
    if response.status_code >= 300 and response.status_code != 409:
        raise RuntimeError(f"writing the cluster-info ConfigMap: {response.status_code} {response.text}")

"""A small kopf operator used by the tests: each Greeter gets a ConfigMap with its greeting.

It exercises what operators do against an apiserver: watch a custom resource, create a child
owned by it, patch the parent's status, react to updates and to deletion through a finalizer.
"""

from __future__ import annotations

from typing import Any

import kopf
import kubernetes


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = True
    settings.watching.server_timeout = 30
    kubernetes.config.load_kube_config()


def _configmap(name: str, greeting: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-greeting"},
            "data": {"greeting": greeting}}


@kopf.on.create("test.pyk8s.io", "v1", "greeters")
def create(spec: dict[str, Any], name: str, namespace: str, body: Any, **_: Any) -> dict[str, Any]:
    cm = _configmap(name, f"Hello, {spec.get('who', 'world')}!")
    kopf.adopt(cm, owner=body)
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, cm)
    return {"configmap": cm["metadata"]["name"]}


@kopf.on.update("test.pyk8s.io", "v1", "greeters", field="spec.who")
def update(new: str, name: str, namespace: str, **_: Any) -> dict[str, Any]:
    kubernetes.client.CoreV1Api().patch_namespaced_config_map(
        f"{name}-greeting", namespace, {"data": {"greeting": f"Hello, {new}!"}}
    )
    return {"updated": True}


@kopf.on.delete("test.pyk8s.io", "v1", "greeters")
def delete(name: str, namespace: str, **_: Any) -> None:
    kubernetes.client.CoreV1Api().create_namespaced_config_map(
        namespace, {"metadata": {"name": f"{name}-goodbye"}, "data": {"said": "goodbye"}}
    )

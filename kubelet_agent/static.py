"""Static pods from --pod-manifest-path: run by this kubelet alone, each mirrored into the API as a
mirror pod (annotation kubernetes.io/config.mirror) that carries its status."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import structlog
import yaml

from kubelet_agent.pods.util import normalize_image

log = structlog.get_logger(__name__)

ANNOTATION_HASH = "kubernetes.io/config.hash"
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
ANNOTATION_SOURCE = "kubernetes.io/config.source"
ANNOTATION_SEEN = "kubernetes.io/config.seen"


def is_mirror(pod: dict[str, Any]) -> bool:
    return ANNOTATION_MIRROR in ((pod.get("metadata") or {}).get("annotations") or {})


def default_static(pod: dict[str, Any], node_name: str, text: str) -> dict[str, Any]:
    """Name, UID and defaults as upstream's file source applies them."""
    meta = pod.setdefault("metadata", {})
    meta["namespace"] = meta.get("namespace") or "default"
    meta["name"] = f"{meta['name']}-{node_name}"
    uid = hashlib.md5(f"{node_name}\n{text}".encode()).hexdigest()  # noqa: S324 - an identity, not security
    meta["uid"] = uid
    annotations = meta.setdefault("annotations", {})
    annotations[ANNOTATION_HASH] = uid
    annotations[ANNOTATION_SOURCE] = "file"
    spec = pod.setdefault("spec", {})
    spec["nodeName"] = node_name
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        latest = normalize_image(c.get("image", "")).endswith(":latest")
        c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
    pod.setdefault("status", {})
    pod["apiVersion"] = "v1"
    pod["kind"] = "Pod"
    return pod


def read_manifests(path: str, node_name: str) -> dict[str, dict[str, Any]]:
    """uid -> pod for every manifest file (YAML or JSON) in the directory, or the single file."""
    base = Path(path)
    files = sorted(p for p in base.iterdir() if p.is_file() and not p.name.startswith(".")) \
        if base.is_dir() else ([base] if base.is_file() else [])
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            text = f.read_text()
            pod = yaml.safe_load(text)
        except (OSError, yaml.YAMLError) as exc:
            log.warning("bad static pod manifest", file=str(f), error=str(exc))
            continue
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod" or not (pod.get("metadata") or {}).get("name"):
            continue
        pod = default_static(pod, node_name, text)
        out[pod["metadata"]["uid"]] = pod
    return out


async def read_manifests_async(path: str, node_name: str) -> dict[str, dict[str, Any]]:
    return await asyncio.to_thread(read_manifests, path, node_name)


def mirror_of(pod: dict[str, Any], node: dict[str, Any] | None) -> dict[str, Any]:
    """The mirror pod to create in the API for a static pod."""
    meta = pod["metadata"]
    annotations = {**(meta.get("annotations") or {}), ANNOTATION_MIRROR: meta["uid"]}
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {}),
                     "annotations": annotations},
        "spec": pod["spec"],
    }
    if node and node.get("metadata", {}).get("uid"):
        body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
                                                "uid": node["metadata"]["uid"], "controller": True}]
    return body

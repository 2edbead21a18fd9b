"""Root CA certificate publisher: a `kube-root-ca.crt` ConfigMap (key `ca.crt`) in every namespace
carrying the CA that signs the apiserver's serving certificate, put back when changed or deleted.
The CA comes from --root-ca-file, or else from what the controller-manager's own kubeconfig trusts.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import structlog

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.resources import NAMESPACES
from services.client import AlreadyExists, ApiError, Client, NotFound, gvr, namespace_terminating

log = structlog.get_logger(__name__)

NAME = "root-ca-cert-publisher"

Obj = dict[str, Any]

CONFIGMAPS = gvr("v1", "configmaps")
CONFIGMAP_NAME = "kube-root-ca.crt"
DATA_KEY = "ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = ("CA bundle for verifying the kube-apiserver when it is reached through in-cluster endpoints "
               "such as the kubernetes.default.svc Service; other uses are not guaranteed across clusters.")
WORKERS = 1


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root-ca-file", default="",
                        help="root CA published to every namespace as the kube-root-ca.crt ConfigMap")


def new(ctx: ControllerContext) -> RootCACertPublisher | Idle:
    ca = root_ca(ctx.options, ctx.client)
    if not ca:
        return Idle()
    return RootCACertPublisher(ctx, ca)


def root_ca(options: argparse.Namespace, client: Client) -> str:
    """--root-ca-file's content, else the CA the client verifies the apiserver with, else ""."""
    path = getattr(options, "root_ca_file", "") or ""
    if path:
        return Path(path).read_text()
    config = client.config
    if config.ca_data:
        return config.ca_data
    if config.ca_file:
        return Path(config.ca_file).read_text()
    return ""


class Idle:
    """Without a CA there is nothing to publish (e.g. a plain-HTTP apiserver); say so once."""

    async def run(self) -> None:
        log.info("no root CA known (no --root-ca-file and the apiserver connection has no CA); "
                 "not publishing kube-root-ca.crt ConfigMaps", controller=NAME)


class RootCACertPublisher(QueueController):
    def __init__(self, ctx: ControllerContext, ca: str) -> None:
        self.client = ctx.client
        self.ca = ca
        self.namespaces = ctx.informer(NAMESPACES)
        self.configmaps = ctx.informer(CONFIGMAPS)
        super().__init__(NAME, [self.namespaces, self.configmaps], WORKERS)
        self.namespaces.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new))
        self.configmaps.add_event_handler(self._configmap_changed, lambda old, new: self._configmap_changed(new),
                                          self._configmap_changed)

    def enqueue(self, obj: Obj) -> None:
        self.queue.add(obj["metadata"]["name"])

    def _configmap_changed(self, configmap: Obj) -> None:
        meta = configmap.get("metadata") or {}
        if meta.get("name") == CONFIGMAP_NAME and meta.get("namespace"):
            self.queue.add(meta["namespace"])

    async def sync(self, key: str) -> None:
        namespace = self.namespaces.get(key)
        if namespace is None or namespace["metadata"].get("deletionTimestamp") or (
            (namespace.get("status") or {}).get("phase") == "Terminating"
        ):
            return
        data = {DATA_KEY: self.ca}
        current = self.configmaps.get(CONFIGMAP_NAME, key)
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": CONFIGMAP_NAME, "namespace": key,
                                 "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}},
                    "data": data}
            try:
                await self.client.create(CONFIGMAPS, body, key)
            except (NotFound, AlreadyExists):
                pass
            except ApiError as exc:
                if not namespace_terminating(exc):
                    raise
            return
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        if current.get("data") == data and annotations.get(DESCRIPTION_ANNOTATION):
            return
        body = copy.deepcopy(current)
        body["data"] = data
        body["metadata"]["annotations"] = {**annotations, DESCRIPTION_ANNOTATION: DESCRIPTION}
        await self.client.replace(CONFIGMAPS, body, namespace=key)

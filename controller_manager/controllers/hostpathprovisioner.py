"""A dynamic provisioner of node-local hostPath volumes (`pyk8s-hostpath-provisioner`, provisioner
name `pyk8s.io/hostpath`): what rancher's local-path-provisioner is to kind, for `pyk8s up`.

Not an upstream controller: upstream's dynamic provisioners run outside kube-controller-manager
(the external-provisioner protocol). It speaks that protocol: it serves the claims the
PersistentVolume controller annotated with `volume.kubernetes.io/storage-provisioner: pyk8s.io/hostpath`
once the scheduler chose their node (`volume.kubernetes.io/selected-node`, so its classes must be
WaitForFirstConsumer), creating a volume pre-bound to the claim that the PersistentVolume controller
then binds. Directories are made and removed the way local-path does it, by short-lived helper pods
on the volume's node: one creates the directory world-writable (0777, so containers running as any
user can write) before the volume exists; once a Delete volume is Released, another removes the
directory, then the volume object goes. It is off unless --controllers names it.
"""

from __future__ import annotations

import posixpath
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.resources import NODES, PODS, PVCS, PVS, STORAGE_CLASSES
from services.api.storage import (
    ANN_BETA_STORAGE_PROVISIONER,
    ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER,
    object_class,
)
from services.client import AlreadyExists, NotFound

NAME = "pyk8s-hostpath-provisioner"
DISABLED_BY_DEFAULT = True
PROVISIONER = "pyk8s.io/hostpath"
DEFAULT_BASE_PATH = "/var/lib/pyk8s-storage"


HOSTNAME_LABEL = "kubernetes.io/hostname"

HELPER_NAMESPACE = "kube-system"
HELPER_IMAGE = "busybox"
HELPER_CONTAINER = "helper"
HELPER_MOUNT = "/pyk8s-storage"
#: read only by pyk8s's hollow (simulated) kubelet, whose containers otherwise never exit; a real
#: kubelet ignores it
HOLLOW_EXIT_ANNOTATION = f"hollow.pyk8s.io/container.{HELPER_CONTAINER}"
HELPER_POLL_SECONDS = 1.0

CLAIM_PREFIX = "pvc:"
VOLUME_PREFIX = "pv:"

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> HostPathProvisioner:
    return HostPathProvisioner(ctx)


def volume_name(claim: Obj) -> str:
    """Upstream's external provisioners name a claim's volume `pvc-<claim uid>`."""
    return f"pvc-{claim['metadata']['uid']}"


def claim_wants_us(claim: Obj) -> bool:
    ann = claim["metadata"].get("annotations") or {}
    return (ann.get(ANN_STORAGE_PROVISIONER) or ann.get(ANN_BETA_STORAGE_PROVISIONER)) == PROVISIONER


def provisioning_problem(claim: Obj, storage_class: Obj | None) -> str | None:
    """Why the claim cannot be provisioned here (None: it can), in the words of a ProvisioningFailed event."""
    spec = claim.get("spec") or {}
    if storage_class is None:
        return f'storageclass.storage.k8s.io "{spec.get("storageClassName") or ""}" not found'
    if storage_class.get("provisioner") != PROVISIONER:
        return f'storage class "{storage_class["metadata"]["name"]}" is not provisioned by {PROVISIONER}'
    if spec.get("selector"):
        return "claim Selector is not supported"
    if (spec.get("volumeMode") or "Filesystem") != "Filesystem":
        return f"volumeMode {spec['volumeMode']} is not supported, only Filesystem"
    if not (claim["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE):
        return (f"{PROVISIONER} provisions node-local volumes: the class must have volumeBindingMode "
                "WaitForFirstConsumer so that a node is selected for the claim")
    return None


def build_volume(claim: Obj, storage_class: Obj, hostname: str) -> Obj:
    """The volume for a claim: a directory named after the volume below the class's `path` on the
    claim's selected node, pre-bound to the claim."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    name = volume_name(claim)
    base = ((storage_class.get("parameters") or {}).get("path") or DEFAULT_BASE_PATH).rstrip("/") or "/"
    pv_spec: Obj = {
        "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {})["storage"]},
        "accessModes": list(spec.get("accessModes") or []),
        "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
        "storageClassName": storage_class["metadata"]["name"],
        "volumeMode": "Filesystem",
        "hostPath": {"path": posixpath.join(base, name), "type": "DirectoryOrCreate"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}},
        "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": meta.get("namespace", ""),
                     "name": meta["name"], "uid": meta["uid"], "resourceVersion": meta.get("resourceVersion", "")},
    }
    if storage_class.get("mountOptions"):
        pv_spec["mountOptions"] = list(storage_class["mountOptions"])
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {ANN_PROVISIONED_BY: PROVISIONER}}, "spec": pv_spec}


def volume_node(volume: Obj) -> str | None:
    """The node a volume of ours lives on, from the nodeAffinity build_volume gave it."""
    terms = ((((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {})
             .get("nodeSelectorTerms") or [])
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == HOSTNAME_LABEL and expr.get("operator") == "In" and expr.get("values"):
                return str(expr["values"][0])
    return None


def helper_pod_name(volume: Obj, action: str) -> str:
    return f"helper-pod-{action}-{volume['metadata']['name']}"


def build_helper_pod(volume: Obj, node: str, action: str) -> Obj:
    """The pod that creates (`create`) or deletes (`delete`) a volume's directory on its node: the
    directory's parent is mounted and only the directory named after the volume is touched."""
    path = ((volume.get("spec") or {}).get("hostPath") or {})["path"]
    parent, leaf = posixpath.split(path.rstrip("/"))
    target = posixpath.join(HELPER_MOUNT, leaf)
    command = ["sh", "-c", f"mkdir -p {target} && chmod 0777 {target}"] if action == "create" \
        else ["rm", "-rf", target]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": helper_pod_name(volume, action), "namespace": HELPER_NAMESPACE,
                     "labels": {"app.kubernetes.io/managed-by": NAME},
                     "annotations": {HOLLOW_EXIT_ANNOTATION: "exit=0"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": HELPER_CONTAINER, "image": HELPER_IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": command,
                            "volumeMounts": [{"name": "data", "mountPath": HELPER_MOUNT}]}],
            "volumes": [{"name": "data", "hostPath": {"path": parent or "/", "type": "DirectoryOrCreate"}}],
        },
    }


def is_ours_to_delete(volume: Obj) -> bool:
    """A Released volume of ours whose policy is Delete and whose deletion has not begun yet."""
    spec = volume.get("spec") or {}
    return ((volume["metadata"].get("annotations") or {}).get(ANN_PROVISIONED_BY) == PROVISIONER
            and not volume["metadata"].get("deletionTimestamp")
            and spec.get("persistentVolumeReclaimPolicy") == "Delete"
            and (volume.get("status") or {}).get("phase") == "Released"
            and posixpath.basename(((spec.get("hostPath") or {}).get("path") or "").rstrip("/"))
            == volume["metadata"]["name"])


class HostPathProvisioner(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.recorder = ctx.recorder(PROVISIONER)
        self.claims = ctx.informer(PVCS)
        self.volumes = ctx.informer(PVS)
        self.classes = ctx.informer(STORAGE_CLASSES)
        super().__init__(NAME, [self.claims, self.volumes, self.classes], 2)
        self.claims.add_event_handler(self._claim_changed, lambda old, new: self._claim_changed(new), None)
        self.volumes.add_event_handler(self._volume_changed, lambda old, new: self._volume_changed(new), None)

    def _claim_changed(self, claim: Obj) -> None:
        if claim_wants_us(claim) and not (claim.get("spec") or {}).get("volumeName"):
            meta = claim["metadata"]
            self.queue.add(f"{CLAIM_PREFIX}{meta.get('namespace', '')}/{meta['name']}")

    def _volume_changed(self, volume: Obj) -> None:
        if is_ours_to_delete(volume):
            self.queue.add(VOLUME_PREFIX + volume["metadata"]["name"])

    async def sync(self, key: str) -> None:
        if key.startswith(CLAIM_PREFIX):
            namespace, _, name = key[len(CLAIM_PREFIX):].partition("/")
            claim = self.claims.get(name, namespace)
            if claim is not None:
                await self.provision(claim)
        elif key.startswith(VOLUME_PREFIX):
            volume = self.volumes.get(key[len(VOLUME_PREFIX):])
            if volume is not None and is_ours_to_delete(volume):
                await self.delete(volume)

    async def provision(self, claim: Obj) -> None:
        meta = claim["metadata"]
        if (not claim_wants_us(claim) or (claim.get("spec") or {}).get("volumeName")
                or meta.get("deletionTimestamp") or self.volumes.get(volume_name(claim)) is not None):
            return
        class_name = object_class(claim)
        storage_class = self.classes.get(class_name)
        ann = meta.get("annotations") or {}
        if storage_class is not None and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" \
                and not ann.get(ANN_SELECTED_NODE):
            return  # the scheduler has not chosen the node yet
        problem = provisioning_problem(claim, storage_class)
        if problem is not None or storage_class is None:
            self.recorder.warning(claim, "ProvisioningFailed",
                                  f'failed to provision volume with StorageClass "{class_name}": {problem}')
            return
        self.recorder.normal(claim, "Provisioning", f'External provisioner is provisioning volume for claim '
                                                    f'"{meta.get("namespace", "")}/{meta["name"]}"')
        node_name = ann[ANN_SELECTED_NODE]
        try:
            node = await self.client.get(NODES, node_name)
        except NotFound:
            self.recorder.warning(claim, "ProvisioningFailed", f'failed to provision volume with StorageClass '
                                                               f'"{class_name}": node "{node_name}" not found')
            raise
        hostname = (node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL) or node_name
        volume = build_volume(claim, storage_class, hostname)
        if not await self._run_helper(volume, node_name, "create"):
            self.recorder.warning(claim, "ProvisioningFailed", f'failed to provision volume with StorageClass '
                                                               f'"{class_name}": helper pod failed to create the '
                                                               f'directory on node {node_name}')
            raise RuntimeError(f"helper pod for claim {meta.get('namespace', '')}/{meta['name']} failed")
        try:
            await self.client.create(PVS, volume)
        except AlreadyExists:
            return
        self.log.info("provisioned volume", claim=f"{meta.get('namespace', '')}/{meta['name']}",
                      volume=volume["metadata"]["name"], node=node_name)
        self.recorder.normal(claim, "ProvisioningSucceeded", f"Successfully provisioned volume "
                                                             f"{volume['metadata']['name']}")

    async def _run_helper(self, volume: Obj, node: str, action: str) -> bool:
        """Whether the helper pod for `action` succeeded; it is started, then polled by requeueing the key
        (RequeueAfter) until it finishes, and removed once it has."""
        pod_name = helper_pod_name(volume, action)
        try:
            pod = await self.client.get(PODS, pod_name, HELPER_NAMESPACE)
        except NotFound:
            await self.client.create(PODS, build_helper_pod(volume, node, action), HELPER_NAMESPACE)
            self.log.info("started helper pod", action=action, volume=volume["metadata"]["name"], node=node)
            raise RequeueAfter(HELPER_POLL_SECONDS) from None
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed"):
            raise RequeueAfter(HELPER_POLL_SECONDS)
        await self.client.delete(PODS, pod_name, HELPER_NAMESPACE, grace_period_seconds=0)
        return phase == "Succeeded"

    async def delete(self, volume: Obj) -> None:
        """Run the helper pod to completion, then delete the volume; requeued while the pod runs."""
        name = volume["metadata"]["name"]
        node = volume_node(volume)
        if node is None:
            self.recorder.warning(volume, "VolumeFailedDelete", "the volume has no node affinity to its node")
            return
        pod_name = helper_pod_name(volume, "delete")
        if not await self._run_helper(volume, node, "delete"):
            self.recorder.warning(volume, "VolumeFailedDelete",
                                  f"helper pod {HELPER_NAMESPACE}/{pod_name} failed to delete the directory on "
                                  f"node {node}")
            raise RuntimeError(f"helper pod for volume {name} failed")
        try:
            await self.client.delete(PVS, name)
        except NotFound:
            return
        self.log.info("deleted volume", volume=name)

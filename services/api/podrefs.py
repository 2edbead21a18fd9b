"""The API objects a pod refers to by name, as upstream's pkg/api/pod visitors find them: the secrets,
configMaps and claims a kubelet must read to run it. The Node authorizer grants a node exactly these,
and NodeRestriction keeps a node's mirror pods from naming any.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]

#: volume sources whose `secretRef` names a secret of the pod's namespace
_SECRET_REF_VOLUMES = ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos")


def _containers(pod: Obj) -> Iterator[Obj]:
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from (c for c in spec.get(field) or () if isinstance(c, dict))


def _volumes(pod: Obj) -> Iterator[Obj]:
    yield from (v for v in (pod.get("spec") or {}).get("volumes") or () if isinstance(v, dict))


def _projected(volume: Obj, kind: str) -> Iterator[str]:
    for source in (volume.get("projected") or {}).get("sources") or ():
        name = ((source or {}).get(kind) or {}).get("name")
        if name:
            yield name


def secret_names(pod: Obj) -> set[str]:
    """Every secret the pod names: image pull secrets, env and envFrom refs, and volume sources."""
    names = {s.get("name") for s in (pod.get("spec") or {}).get("imagePullSecrets") or () if isinstance(s, dict)}
    for c in _containers(pod):
        names.update(((e or {}).get("secretRef") or {}).get("name") for e in c.get("envFrom") or ())
        names.update((((e or {}).get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
                     for e in c.get("env") or ())
    for v in _volumes(pod):
        names.add((v.get("secret") or {}).get("secretName"))
        names.add((v.get("azureFile") or {}).get("secretName"))
        names.add(((v.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name"))
        names.update(((v.get(kind) or {}).get("secretRef") or {}).get("name") for kind in _SECRET_REF_VOLUMES)
        names.update(_projected(v, "secret"))
    return {n for n in names if isinstance(n, str) and n}


def configmap_names(pod: Obj) -> set[str]:
    """Every configMap the pod names: env and envFrom refs, configMap and projected volumes."""
    names: set[Any] = set()
    for c in _containers(pod):
        names.update(((e or {}).get("configMapRef") or {}).get("name") for e in c.get("envFrom") or ())
        names.update((((e or {}).get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name")
                     for e in c.get("env") or ())
    for v in _volumes(pod):
        names.add((v.get("configMap") or {}).get("name"))
        names.update(_projected(v, "configMap"))
    return {n for n in names if isinstance(n, str) and n}


def claim_names(pod: Obj) -> set[str]:
    """The PersistentVolumeClaims the pod mounts, including those its ephemeral volumes get
    (named `<pod>-<volume>`, as the ephemeral volume controller names them)."""
    pod_name = (pod.get("metadata") or {}).get("name") or ""
    names: set[Any] = set()
    for v in _volumes(pod):
        names.add((v.get("persistentVolumeClaim") or {}).get("claimName"))
        if v.get("ephemeral") is not None and pod_name:
            names.add(f"{pod_name}-{v.get('name')}")
    return {n for n in names if isinstance(n, str) and n}


def persistent_volume_secrets(pv: Obj) -> set[tuple[str, str]]:
    """(namespace, name) of the secrets a PersistentVolume names for mounting, as upstream's
    VisitPVSecretNames: the ones a node needs to attach or mount it."""
    spec = pv.get("spec") or {}
    claim_ns = (spec.get("claimRef") or {}).get("namespace") or ""
    found: set[tuple[str, str]] = set()

    def ref(obj: Any, default_ns: str = "") -> None:
        if isinstance(obj, dict) and obj.get("name"):
            found.add((obj.get("namespace") or default_ns, obj["name"]))

    for kind in ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"):
        ref((spec.get(kind) or {}).get("secretRef"), claim_ns)
    azure = spec.get("azureFile") or {}
    if azure.get("secretName"):
        found.add((azure.get("secretNamespace") or claim_ns or "default", azure["secretName"]))
    csi = spec.get("csi") or {}
    for field in ("nodePublishSecretRef", "nodeStageSecretRef", "controllerPublishSecretRef",
                  "controllerExpandSecretRef", "nodeExpandSecretRef"):
        ref(csi.get(field))
    return {(ns, name) for ns, name in found if ns}

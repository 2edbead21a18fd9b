"""Storage classes as claims and volumes name them: one reading for the apiserver's admission, the
PersistentVolume controller, the provisioner and the scheduler's VolumeBinding."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

#: the pre-1.6 way of naming a class, still honoured ahead of spec.storageClassName
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
#: the annotations a claim and its volume carry through binding and dynamic provisioning
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")


def object_class(obj: Obj) -> str:
    """The class a claim asks for or a volume belongs to; "" for none (a claim without storageClassName
    asks for "" until it is given the default class)."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    if BETA_STORAGE_CLASS in ann:
        return str(ann[BETA_STORAGE_CLASS])
    return (obj.get("spec") or {}).get("storageClassName") or ""


def names_class(claim: Obj) -> bool:
    """Whether the claim names a class at all ("" included): only those without get the default one."""
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    return BETA_STORAGE_CLASS in ann or (claim.get("spec") or {}).get("storageClassName") is not None


def is_default_class(storage_class: Obj) -> bool:
    ann = (storage_class.get("metadata") or {}).get("annotations") or {}
    return any(ann.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)


def default_storage_class(classes: list[Obj]) -> Obj | None:
    """Of the classes marked default, the newest (then the first by name), as upstream since 1.28, so
    adding a new default before unmarking the old one never leaves claims without a class."""
    marked = sorted((c for c in classes if is_default_class(c)), key=lambda c: c["metadata"]["name"])
    return max(marked, key=lambda c: c["metadata"].get("creationTimestamp") or "", default=None)

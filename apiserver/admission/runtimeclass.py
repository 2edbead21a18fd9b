"""The RuntimeClass admission plugin, as upstream's plugin/pkg/admission/runtimeclass.

On a pod's create, `spec.runtimeClassName` must name an existing RuntimeClass; the class's
`overhead.podFixed` becomes the pod's `spec.overhead` and its `scheduling` is merged into the pod's
nodeSelector (a conflicting key is refused) and tolerations. Validation then refuses an overhead the
pod set itself that the class does not define. Both phases read the classes from the watch cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiserver.admission.interfaces import CREATE, Attributes, MutationInterface, ValidationInterface
from services.api import errors
from services.api.quantity import parse_quantity

Obj = dict[str, Any]

NAME = "RuntimeClass"


def runtime_classes(cache: Any, root: str) -> dict[str, Obj]:
    """Every RuntimeClass by name, from the watch cache (upstream's lister)."""
    store = cache.resources.get(f"{root}runtimeclasses/")
    if store is None:
        return {}
    return {e.obj["metadata"]["name"]: e.obj for e in store.entries.values()}


def _refuse(pod: Obj, message: str) -> errors.StatusError:
    meta = pod.get("metadata") or {}
    return errors.forbidden("pods", "", meta.get("name") or meta.get("generateName") or "", message)


def _runtime_class(pod: Obj, classes: Mapping[str, Obj]) -> Obj | None:
    name = (pod.get("spec") or {}).get("runtimeClassName")
    if not name:
        return None
    rc = classes.get(name)
    if rc is None:
        raise _refuse(pod, f'pod rejected: RuntimeClass "{name}" not found')
    return rc


def _same_overhead(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Semantic equality of two resource lists: `1000m` and `1` are the same CPU."""
    if a is None or b is None:
        return a is b
    try:
        return a.keys() == b.keys() and all(parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)
    except (ValueError, TypeError):
        return False


def admit(pod: Obj, classes: Mapping[str, Obj]) -> None:
    """The mutating phase on a pod create: overhead and scheduling from the pod's RuntimeClass."""
    rc = _runtime_class(pod, classes)
    if rc is None:
        return
    spec = pod.setdefault("spec", {})
    overhead = rc.get("overhead")
    if overhead is not None:
        fixed = overhead.get("podFixed")
        if spec.get("overhead") is not None and not _same_overhead(fixed, spec["overhead"]):
            raise _refuse(pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
        if fixed is not None:
            spec["overhead"] = dict(fixed)
    scheduling = rc.get("scheduling")
    if scheduling is None:
        return
    wanted = scheduling.get("nodeSelector") or {}
    if wanted:
        selector = dict(spec.get("nodeSelector") or {})
        for key, value in wanted.items():
            if key in selector and selector[key] != value:
                raise _refuse(pod, f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                                   f"pod.spec.nodeSelector[{key}] = {selector[key]}")
            selector[key] = value
        spec["nodeSelector"] = selector
    merged = merge_tolerations(spec.get("tolerations") or [], scheduling.get("tolerations") or [])
    if merged:
        spec["tolerations"] = merged


def validate(pod: Obj, classes: Mapping[str, Obj]) -> None:
    """The validating phase on a pod create: the pod's overhead is exactly its RuntimeClass's."""
    rc = _runtime_class(pod, classes)
    overhead = (pod.get("spec") or {}).get("overhead")
    if rc is not None and rc.get("overhead") is not None:
        if not _same_overhead((rc.get("overhead") or {}).get("podFixed"), overhead):
            raise _refuse(pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
    elif overhead is not None:
        raise _refuse(pod, "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")


def _is_superset(ss: Obj, t: Obj) -> bool:
    """Whether toleration `ss` tolerates everything `t` does (upstream's isSuperset)."""
    if ss == t:
        return True
    ss_key, t_key = ss.get("key") or "", t.get("key") or ""
    ss_op = ss.get("operator") or "Equal"
    if t_key != ss_key and (ss_key or ss_op != "Exists"):
        return False
    if (t.get("effect") or "") != (ss.get("effect") or "") and ss.get("effect"):
        return False
    if ss.get("effect") == "NoExecute" and ss.get("tolerationSeconds") is not None:
        if t.get("tolerationSeconds") is None or t["tolerationSeconds"] > ss["tolerationSeconds"]:
            return False
    if ss_op == "Equal":
        return (t.get("operator") or "Equal") == "Equal" and (t.get("value") or "") == (ss.get("value") or "")
    return ss_op == "Exists"


def merge_tolerations(first: list[Obj], second: list[Obj]) -> list[Obj]:
    """Both lists without the tolerations another one already covers; of two equal ones the first stays."""
    every = [*first, *second]
    merged: list[Obj] = []
    for i, t in enumerate(every):
        if any(_is_superset(kept, t) for kept in merged):
            continue
        if any(t != later and _is_superset(later, t) for later in every[i + 1:]):
            continue
        merged.append(t)
    return merged


class RuntimeClass(MutationInterface, ValidationInterface):
    """The plugin in the chain: pods, on create."""

    name = NAME
    operations = frozenset({CREATE})
    resources = frozenset({("", "pods")})

    async def admit(self, a: Attributes) -> None:
        admit(a.obj, runtime_classes(self.config.cache, self.config.root))

    async def validate(self, a: Attributes) -> None:
        validate(a.obj, runtime_classes(self.config.cache, self.config.root))

"""The DefaultIngressClass admission plugin: a new Ingress that names no class (no
spec.ingressClassName, not even "", and no `kubernetes.io/ingress.class` annotation) gets the
IngressClass annotated `ingressclass.kubernetes.io/is-default-class: "true"`; with several such
classes, the newest (then the first by name), as upstream since 1.28."""

from __future__ import annotations

from apiserver.admission.interfaces import Attributes, MutationInterface, Obj

DEFAULT_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
CLASS_ANNOTATION = "kubernetes.io/ingress.class"


def default_ingress_class(classes: list[Obj]) -> Obj | None:
    marked = sorted((c for c in classes if ((c.get("metadata") or {}).get("annotations") or {})
                     .get(DEFAULT_ANNOTATION) == "true"), key=lambda c: c["metadata"]["name"])
    return max(marked, key=lambda c: c["metadata"].get("creationTimestamp") or "", default=None)


class DefaultIngressClass(MutationInterface):
    name = "DefaultIngressClass"
    resources = frozenset({("networking.k8s.io", "ingresses")})

    async def admit(self, a: Attributes) -> None:
        spec = a.obj.get("spec")
        annotations = (a.obj.get("metadata") or {}).get("annotations") or {}
        if not isinstance(spec, dict) or spec.get("ingressClassName") is not None or CLASS_ANNOTATION in annotations:
            return
        cache = self.config.cache.resources.get(f"{self.config.root}ingressclasses/")
        default = default_ingress_class([e.obj for e in cache.entries.values()] if cache else [])
        if default is not None:
            spec["ingressClassName"] = default["metadata"]["name"]

"""The AlwaysPullImages admission plugin (off by default): every container of a pod pulls its image
on each start (`imagePullPolicy: Always`), so a pod can only use an image its node may pull, not one
another pod left in the node's cache. An update that brings no new image is left alone."""

from __future__ import annotations

from collections.abc import Iterator

from apiserver.admission.interfaces import CREATE, UPDATE, Attributes, MutationInterface, Obj, ValidationInterface
from services.api import errors

ALWAYS = "Always"
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


def containers(pod: Obj | None) -> Iterator[tuple[str, Obj]]:
    """Each container of the pod with its field path, in upstream's VisitContainersWithPath order."""
    spec = (pod or {}).get("spec")
    if not isinstance(spec, dict):
        return
    for kind in CONTAINER_KINDS:
        items = spec.get(kind)
        if not isinstance(items, list):
            continue
        for i, container in enumerate(items):
            if isinstance(container, dict):
                yield f"spec.{kind}[{i}]", container


class AlwaysPullImages(MutationInterface, ValidationInterface):
    name = "AlwaysPullImages"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({("", "pods")})

    @staticmethod
    def _ignored(a: Attributes) -> bool:
        """An update whose containers use only images the pod already had."""
        if a.operation != UPDATE:
            return False
        old_images = {c.get("image") for _, c in containers(a.old)}
        return all(c.get("image") in old_images for _, c in containers(a.obj))

    async def admit(self, a: Attributes) -> None:
        if self._ignored(a):
            return
        for _, container in containers(a.obj):
            container["imagePullPolicy"] = ALWAYS

    async def validate(self, a: Attributes) -> None:
        if self._ignored(a):
            return
        problems = [f'{path}.imagePullPolicy: Unsupported value: "{c.get("imagePullPolicy") or ""}": '
                    f'supported values: "{ALWAYS}"'
                    for path, c in containers(a.obj) if c.get("imagePullPolicy") != ALWAYS]
        if problems:
            message = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
            raise errors.forbidden("pods", "", a.name, message)

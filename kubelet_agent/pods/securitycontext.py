"""The security context a container runs with (upstream's determineEffectiveSecurityContext): the
container's fields over the pod's, the pod's supplemental groups plus its fsGroup, and no_new_privs
when privilege escalation is explicitly off."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubelet_agent.cri.types import ImageInfo


@dataclass
class Effective:
    run_as_user: int | None = None
    run_as_group: int | None = None
    supplemental_groups: list[int] = field(default_factory=list)
    privileged: bool = False
    readonly_rootfs: bool = False
    run_as_non_root: bool = False
    no_new_privs: bool = False
    add_capabilities: list[str] = field(default_factory=list)
    drop_capabilities: list[str] = field(default_factory=list)


def effective(pod_spec: dict[str, Any], container: dict[str, Any]) -> Effective:
    pod_sc = pod_spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}

    def pick(key: str) -> Any:
        return sc[key] if sc.get(key) is not None else pod_sc.get(key)

    groups = [int(g) for g in pod_sc.get("supplementalGroups") or []]
    if pod_sc.get("fsGroup") is not None and int(pod_sc["fsGroup"]) not in groups:
        groups.append(int(pod_sc["fsGroup"]))
    caps = sc.get("capabilities") or {}
    user, group = pick("runAsUser"), pick("runAsGroup")
    return Effective(
        run_as_user=int(user) if user is not None else None,
        run_as_group=int(group) if group is not None else None,
        supplemental_groups=groups,
        privileged=bool(sc.get("privileged")),
        readonly_rootfs=bool(sc.get("readOnlyRootFilesystem")),
        run_as_non_root=bool(pick("runAsNonRoot")),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        add_capabilities=list(caps.get("add") or []),
        drop_capabilities=list(caps.get("drop") or []),
    )


def non_root_violation(security: Effective, image: ImageInfo | None, pod: str, container: str) -> str | None:
    """Why the container may not start under runAsNonRoot (upstream's verifyRunAsNonRoot), None if it may.

    `pod` is upstream's format.Pod text, name_namespace(uid). An image that names no user runs as root.
    """
    if not security.run_as_non_root:
        return None
    if security.run_as_user is not None:
        if security.run_as_user == 0:
            return f"container's runAsUser breaks non-root policy (pod: \"{pod}\", container: {container})"
        return None
    uid = image.uid if image is not None and (image.uid is not None or image.username) else 0
    if uid == 0:
        return f"container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {container})"
    if uid is None and image is not None:
        return (f"container has runAsNonRoot and image has non-numeric user ({image.username}), cannot verify "
                f"user is non-root (pod: \"{pod}\", container: {container})")
    return None

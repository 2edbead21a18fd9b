"""Pod sysctls as upstream's pod validation checks them: names in the kernel's dotted or slashed form,
at most 253 characters, no name twice, and no net or IPC sysctl in a pod sharing the host's namespace."""

from __future__ import annotations

import re
from typing import Any

from apiserver.registry.strategy import Cause
from services.api import validation as v
from services.api.sysctl import IPC, NET, namespace_of, normalize_name

SYSCTL_MAX_LENGTH = 253
_SEGMENT = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SYSCTL_PATTERN = f"^({_SEGMENT}[\\./])*{_SEGMENT}$"
_SYSCTL = re.compile(SYSCTL_PATTERN)


def _host_namespace_conflict(name: str, spec: dict[str, Any]) -> str:
    namespace = namespace_of(normalize_name(name))
    if spec.get("hostNetwork") and namespace == NET:
        return "may not be specified when 'hostNetwork' is true"
    if spec.get("hostIPC") and namespace == IPC:
        return "may not be specified when 'hostIPC' is true"
    return ""


def validate_sysctls(spec: dict[str, Any], path: str) -> list[Cause]:
    """Causes for `<path>.securityContext.sysctls` of a pod spec (upstream's validateSysctls)."""
    sysctls = (spec.get("securityContext") or {}).get("sysctls") or []
    if not isinstance(sysctls, list):
        return []
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, sysctl in enumerate(sysctls):
        at = f"{path}.securityContext.sysctls[{i}].name"
        name = str((sysctl or {}).get("name") or "") if isinstance(sysctl, dict) else ""
        if not name:
            causes.append(v.required(at))
        elif len(name) > SYSCTL_MAX_LENGTH or not _SYSCTL.fullmatch(name):
            causes.append(v.invalid(at, name, f"must have at most {SYSCTL_MAX_LENGTH} characters and match regex "
                                              f"{SYSCTL_PATTERN}"))
        elif name in seen:
            causes.append(v.duplicate(at, name))
        if name and (conflict := _host_namespace_conflict(name, spec)):
            causes.append(v.invalid(at, name, conflict))
        seen.add(name)
    return causes

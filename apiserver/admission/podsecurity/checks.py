"""The Pod Security Standards checks of upstream's pod-security-admission `policy` package (v1.32),
with their versions, reasons and details word for word.

A check has an ID, a level and one implementation per policy version it changed in; evaluating a
level at a version runs, for every check of that level or below, the newest implementation not
newer than the version. A restricted check may stand in for a baseline one (restrictedVolumes for
hostPathVolumes, say), which then does not run at restricted. Results come in upstream's order:
baseline checks by ID, then restricted checks by ID.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from apiserver.admission.podsecurity.api import BASELINE, PRIVILEGED, RESTRICTED, LevelVersion, Version

Obj = dict[str, Any]


@dataclass(frozen=True)
class Result:
    """A failed check: a short reason and what exactly breaks it."""

    reason: str
    detail: str = ""


CheckFn = Callable[[Obj, Obj], Result | None]


@dataclass(frozen=True)
class Check:
    id: str
    level: str
    #: (minimum version, implementation), oldest first
    versions: tuple[tuple[int, CheckFn], ...]
    #: baseline checks this one replaces at restricted, from its first version on
    overrides: tuple[str, ...] = field(default=())


# -- helpers, as upstream's --------------------------------------------------------------------------

def _quote(text: str) -> str:
    """Go's %q for the strings these messages hold."""
    return json.dumps(text, ensure_ascii=False)


def join_quote(items: list[str]) -> str:
    return ", ".join(_quote(i) for i in items)


def pluralize(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


def _containers(spec: Obj) -> Iterator[Obj]:
    """Every container, init container and ephemeral container (upstream's visitContainers)."""
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                yield c


def _sc(obj: Obj) -> Obj:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _name(c: Obj) -> str:
    return str(c.get("name") or "")


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    """`pod`, `container "a"` / `containers "a", "b"`: who set a forbidden value."""
    out = ["pod"] if pod_bad else []
    if containers:
        out.append(f"{pluralize('container', 'containers', len(containers))} {join_quote(containers)}")
    return out


def _windows(spec: Obj) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


# -- baseline ----------------------------------------------------------------------------------------

def host_namespaces(meta: Obj, spec: Obj) -> Result | None:
    used = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return Result("host namespaces", ", ".join(used)) if used else None


def privileged(meta: Obj, spec: Obj) -> Result | None:
    bad = [_name(c) for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not bad:
        return None
    return Result("privileged", f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must not set "
                                "securityContext.privileged=true")


BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def capabilities_baseline(meta: Obj, spec: Obj) -> Result | None:
    bad: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        added = [str(x) for x in (_sc(c).get("capabilities") or {}).get("add") or []]
        extra = [x for x in added if x not in BASELINE_CAPABILITIES]
        if extra:
            bad.append(_name(c))
            caps.update(extra)
    if not bad:
        return None
    return Result("non-default capabilities", f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} "
                                              f"must not include {join_quote(sorted(caps))} in "
                                              "securityContext.capabilities.add")


def host_path_volumes(meta: Obj, spec: Obj) -> Result | None:
    bad = [str(vol.get("name") or "") for vol in spec.get("volumes") or []
           if isinstance(vol, dict) and vol.get("hostPath") is not None]
    return Result("hostPath volumes", f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)}") if bad else None


def host_ports(meta: Obj, spec: Obj) -> Result | None:
    bad: list[str] = []
    ports: set[str] = set()
    for c in _containers(spec):
        used = [str(p.get("hostPort")) for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            bad.append(_name(c))
            ports.update(used)
    if not bad:
        return None
    return Result("hostPort", f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} "
                              f"{pluralize('uses', 'use', len(bad))} {pluralize('hostPort', 'hostPorts', len(ports))} "
                              f"{', '.join(sorted(ports))}")


APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_annotation_allowed(value: str) -> bool:
    return not value or value == "runtime/default" or value.startswith("localhost/")


def apparmor_profile(meta: Obj, spec: Obj) -> Result | None:
    values: set[str] = set()

    def bad_type(obj: Obj) -> bool:
        profile = _sc(obj).get("appArmorProfile")
        if not isinstance(profile, dict) or profile.get("type") in ("RuntimeDefault", "Localhost"):
            return False
        values.add(str(profile.get("type") or ""))
        return True

    pod_bad = bad_type(spec)
    bad = [_name(c) for c in _containers(spec) if bad_type(c)]
    setters = _setters(pod_bad, bad)
    annotations = sorted(f"{k}={_quote(str(val))}" for k, val in ((meta.get("annotations") or {}).items())
                         if k.startswith(APPARMOR_ANNOTATION_PREFIX) and not _apparmor_annotation_allowed(str(val)))
    listed = sorted(values) + annotations
    if annotations:
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    return Result(pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
                  f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(listed)}")


def _selinux(allowed_types: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result | None:
        types: set[str] = set()
        flags = {"user": False, "role": False}

        def valid(opts: Obj) -> bool:
            ok = True
            if str(opts.get("type") or "") not in allowed_types:
                types.add(str(opts.get("type") or ""))
                ok = False
            for key in ("user", "role"):
                if opts.get(key):
                    flags[key] = True
                    ok = False
            return ok

        pod_opts = _sc(spec).get("seLinuxOptions")
        pod_bad = isinstance(pod_opts, dict) and not valid(pod_opts)
        bad = [_name(c) for c in _containers(spec)
               if isinstance(_sc(c).get("seLinuxOptions"), dict) and not valid(_sc(c)["seLinuxOptions"])]
        setters = _setters(pod_bad, bad)
        if not setters:
            return None
        data = [f"{pluralize('type', 'types', len(types))} {join_quote(sorted(types))}"] if types else []
        data += [f"{key} may not be set" for key in ("user", "role") if flags[key]]
        return Result("seLinuxOptions", f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: "
                                        f"{'; '.join(data)}")
    return check


def proc_mount(meta: Obj, spec: Obj) -> Result | None:
    bad: list[str] = []
    kinds: set[str] = set()
    for c in _containers(spec):
        value = _sc(c).get("procMount")
        if value is not None and value != "Default":
            bad.append(_name(c))
            kinds.add(str(value))
    if not bad:
        return None
    return Result("procMount", f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must not set "
                               f"securityContext.procMount to {join_quote(sorted(kinds))}")


SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"
_SECCOMP_TYPES = ("RuntimeDefault", "Localhost")


def _seccomp_annotation_allowed(value: str) -> bool:
    return value in ("runtime/default", "docker/default") or value.startswith("localhost/")


def seccomp_baseline_1_0(meta: Obj, spec: Obj) -> Result | None:
    annotations = meta.get("annotations") or {}
    keys = [SECCOMP_POD_ANNOTATION] + [SECCOMP_CONTAINER_ANNOTATION_PREFIX + _name(c) for c in _containers(spec)]
    bad = sorted({f"{k}={_quote(str(annotations[k]))}" for k in keys
                  if k in annotations and not _seccomp_annotation_allowed(str(annotations[k]))})
    if not bad:
        return None
    return Result("seccompProfile", f"forbidden {pluralize('annotation', 'annotations', len(bad))} {', '.join(bad)}")


def _explicit_seccomp(spec: Obj) -> tuple[bool, bool, list[str], list[str], set[str]]:
    """(pod set a good type, pod set a bad one, containers that set a bad one, containers that set none, bad types)."""
    values: set[str] = set()
    profile = _sc(spec).get("seccompProfile")
    pod_good = pod_bad = False
    if isinstance(profile, dict):
        if profile.get("type") in _SECCOMP_TYPES:
            pod_good = True
        else:
            pod_bad = True
            values.add(str(profile.get("type") or ""))
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        own = _sc(c).get("seccompProfile")
        if isinstance(own, dict):
            if own.get("type") not in _SECCOMP_TYPES:
                explicit.append(_name(c))
                values.add(str(own.get("type") or ""))
        elif not pod_good:
            implicit.append(_name(c))
    return pod_good, pod_bad, explicit, implicit, values


def seccomp_baseline_1_19(meta: Obj, spec: Obj) -> Result | None:
    _, pod_bad, explicit, _, values = _explicit_seccomp(spec)
    setters = _setters(pod_bad, explicit)
    if not setters:
        return None
    return Result("seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
                                    f"{join_quote(sorted(values))}")


def _sysctls(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result | None:
        bad = [str(s.get("name")) for s in _sc(spec).get("sysctls") or []
               if isinstance(s, dict) and s.get("name") not in allowed]
        return Result("forbidden sysctls", ", ".join(bad)) if bad else None
    return check


SYSCTLS_1_0 = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                         "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"})
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                               "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def windows_host_process(meta: Obj, spec: Obj) -> Result | None:
    def set_true(obj: Obj) -> bool:
        return (_sc(obj).get("windowsOptions") or {}).get("hostProcess") is True

    setters = _setters(set_true(spec), [_name(c) for c in _containers(spec) if set_true(c)])
    if not setters:
        return None
    return Result("hostProcess",
                  f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true")


# -- restricted --------------------------------------------------------------------------------------

#: the inline volume sources restricted pods may use
ALLOWED_VOLUME_SOURCES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                          "projected", "secret")
#: the sources upstream names when refusing one, in its switch order
NAMED_VOLUME_SOURCES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs",
                        "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume",
                        "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos")


def restricted_volumes(meta: Obj, spec: Obj) -> Result | None:
    bad: list[str] = []
    kinds: set[str] = set()
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict) or any(vol.get(s) is not None for s in ALLOWED_VOLUME_SOURCES):
            continue
        bad.append(str(vol.get("name") or ""))
        kinds.add(next((s for s in NAMED_VOLUME_SOURCES if vol.get(s) is not None), "unknown"))
    if not bad:
        return None
    return Result("restricted volume types",
                  f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)} {pluralize('uses', 'use', len(bad))} "
                  f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} "
                  f"{join_quote(sorted(kinds))}")


def allow_privilege_escalation_1_8(meta: Obj, spec: Obj) -> Result | None:
    bad = [_name(c) for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return Result("allowPrivilegeEscalation != false",
                  f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must set "
                  "securityContext.allowPrivilegeEscalation=false")


def run_as_non_root(meta: Obj, spec: Obj) -> Result | None:
    pod_value = _sc(spec).get("runAsNonRoot")
    pod_bad, pod_ok = pod_value is False, pod_value is True
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(_name(c))
        elif not pod_ok:
            implicit.append(_name(c))
    setters = _setters(pod_bad, explicit)
    if setters:
        return Result("runAsNonRoot != true",
                      f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return Result("runAsNonRoot != true", f"pod or {pluralize('container', 'containers', len(implicit))} "
                                              f"{join_quote(implicit)} must set securityContext.runAsNonRoot=true")
    return None


def _root(obj: Obj) -> bool:
    uid = _sc(obj).get("runAsUser")
    return type(uid) is int and uid == 0


def run_as_user(meta: Obj, spec: Obj) -> Result | None:
    setters = _setters(_root(spec), [_name(c) for c in _containers(spec) if _root(c)])
    return Result("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted_1_19(meta: Obj, spec: Obj) -> Result | None:
    _, pod_bad, explicit, implicit, values = _explicit_seccomp(spec)
    setters = _setters(pod_bad, explicit)
    if setters:
        return Result("seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type "
                                        f"to {join_quote(sorted(values))}")
    if implicit:
        return Result("seccompProfile", f"pod or {pluralize('container', 'containers', len(implicit))} "
                                        f"{join_quote(implicit)} must set securityContext.seccompProfile.type to "
                                        '"RuntimeDefault" or "Localhost"')
    return None


def capabilities_restricted_1_22(meta: Obj, spec: Obj) -> Result | None:
    missing_drop: list[str] = []
    adding: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if not isinstance(capabilities, dict):
            missing_drop.append(_name(c))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(_name(c))
        extra = [str(x) for x in capabilities.get("add") or [] if x != "NET_BIND_SERVICE"]
        if extra:
            adding.append(_name(c))
            caps.update(extra)
    details = []
    if missing_drop:
        details.append(f"{pluralize('container', 'containers', len(missing_drop))} {join_quote(missing_drop)} must "
                       'set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{pluralize('container', 'containers', len(adding))} {join_quote(adding)} must not include "
                       f"{join_quote(sorted(caps))} in securityContext.capabilities.add")
    return Result("unrestricted capabilities", "; ".join(details)) if details else None


def _linux_only(check: CheckFn) -> CheckFn:
    """The 1.25 form of a restricted check: pods that say they run on Windows pass."""
    def windows_exempt(meta: Obj, spec: Obj) -> Result | None:
        return None if _windows(spec) else check(meta, spec)
    return windows_exempt


CHECKS: tuple[Check, ...] = (
    Check("allowPrivilegeEscalation", RESTRICTED,
          ((8, allow_privilege_escalation_1_8), (25, _linux_only(allow_privilege_escalation_1_8)))),
    Check("appArmorProfile", BASELINE, ((0, apparmor_profile),)),
    Check("capabilities_baseline", BASELINE, ((0, capabilities_baseline),)),
    Check("capabilities_restricted", RESTRICTED,
          ((22, capabilities_restricted_1_22), (25, _linux_only(capabilities_restricted_1_22))),
          overrides=("capabilities_baseline",)),
    Check("hostNamespaces", BASELINE, ((0, host_namespaces),)),
    Check("hostPathVolumes", BASELINE, ((0, host_path_volumes),)),
    Check("hostPorts", BASELINE, ((0, host_ports),)),
    Check("privileged", BASELINE, ((0, privileged),)),
    Check("procMount", BASELINE, ((0, proc_mount),)),
    Check("restrictedVolumes", RESTRICTED, ((0, restricted_volumes),), overrides=("hostPathVolumes",)),
    Check("runAsNonRoot", RESTRICTED, ((0, run_as_non_root),)),
    Check("runAsUser", RESTRICTED, ((23, run_as_user),)),
    Check("seLinuxOptions", BASELINE, (
        (0, _selinux(frozenset({"", "container_t", "container_init_t", "container_kvm_t"}))),
        (31, _selinux(frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}))))),
    Check("seccompProfile_baseline", BASELINE, ((0, seccomp_baseline_1_0), (19, seccomp_baseline_1_19))),
    Check("seccompProfile_restricted", RESTRICTED,
          ((19, seccomp_restricted_1_19), (25, _linux_only(seccomp_restricted_1_19))),
          overrides=("seccompProfile_baseline",)),
    Check("sysctls", BASELINE, ((0, _sysctls(SYSCTLS_1_0)), (27, _sysctls(SYSCTLS_1_27)), (29, _sysctls(SYSCTLS_1_29)),
                                (32, _sysctls(SYSCTLS_1_32)))),
    Check("windowsHostProcess", BASELINE, ((0, windows_host_process),)),
)

#: the newest policy version any check changed in; later versions (and latest) evaluate as this one
MAX_MINOR = max(minimum for c in CHECKS for minimum, _ in c.versions)


def _implementation(check: Check, minor: int) -> CheckFn | None:
    found = None
    for minimum, fn in check.versions:
        if minimum <= minor:
            found = fn
    return found


def _checks_for(level: str, minor: int) -> tuple[CheckFn, ...]:
    """The implementations a level runs at a version, baseline IDs first, then restricted, each sorted."""
    picked = {c.id: (c, fn) for c in CHECKS if (fn := _implementation(c, minor)) is not None
              and (c.level == BASELINE or level == RESTRICTED)}
    if level == RESTRICTED:
        for c, _ in list(picked.values()):
            if c.level == RESTRICTED:
                for overridden in c.overrides:
                    picked.pop(overridden, None)
    ordered = sorted(picked.values(), key=lambda p: (p[0].level != BASELINE, p[0].id))
    return tuple(fn for _, fn in ordered)


_TABLE: dict[tuple[str, int], tuple[CheckFn, ...]] = {
    (level, minor): _checks_for(level, minor) for level in (BASELINE, RESTRICTED) for minor in range(MAX_MINOR + 1)
}


def evaluate(lv: LevelVersion, meta: Obj, spec: Obj) -> list[Result]:
    """The checks a pod (or a template's metadata and spec) fails at this level and version."""
    if lv.level == PRIVILEGED:
        return []
    version: Version = lv.version
    minor = MAX_MINOR if version.latest or version.minor > MAX_MINOR else version.minor
    level = BASELINE if lv.level == BASELINE else RESTRICTED
    return [r for fn in _TABLE[(level, minor)] if (r := fn(meta, spec)) is not None]


def forbidden_detail(results: list[Result]) -> str:
    """`reason (detail), reason (detail)`: upstream's AggregateCheckResult.ForbiddenDetail."""
    return ", ".join(f"{r.reason} ({r.detail})" if r.detail else r.reason for r in results)


def forbidden_reason(results: list[Result]) -> str:
    return ", ".join(r.reason for r in results)

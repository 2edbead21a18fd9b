"""PodSpec defaults and validation, shared by pods and by every pod template
(Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, ReplicationController, PodTemplate)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from apiserver.registry.base import get, setdefault
from apiserver.registry.strategy import Cause, Obj
from apiserver.registry.sysctls import validate_sysctls
from services.api import validation as v

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PROTOCOLS = ("SCTP", "TCP", "UDP")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)
_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")


# -- defaults ---------------------------------------------------------------------


def image_pull_policy(image: str) -> str:
    """Always for `:latest` or untagged images, IfNotPresent otherwise (digests included)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    setdefault(probe, "timeoutSeconds", 1)
    setdefault(probe, "periodSeconds", 10)
    setdefault(probe, "successThreshold", 1)
    setdefault(probe, "failureThreshold", 3)
    _default_handler(probe)


def _default_handler(handler: Any) -> None:
    if isinstance(handler, dict) and isinstance(handler.get("httpGet"), dict):
        setdefault(handler["httpGet"], "path", "/")
        setdefault(handler["httpGet"], "scheme", "HTTP")


def default_container(container: Obj) -> None:
    """Upstream's container defaults; shared by every kind of container a pod has, ephemeral ones too."""
    if isinstance(container.get("image"), str):
        setdefault(container, "imagePullPolicy", image_pull_policy(container["image"]))
    setdefault(container, "terminationMessagePath", "/dev/termination-log")
    setdefault(container, "terminationMessagePolicy", "File")
    setdefault(container, "resources", {})
    for port in container.get("ports") or []:
        setdefault(port, "protocol", "TCP")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(container.get(key))
    for hook in ("postStart", "preStop"):
        _default_handler(get(container, "lifecycle", hook))
    for env in container.get("env") or []:
        field_ref = get(env, "valueFrom", "fieldRef")
        if isinstance(field_ref, dict):
            setdefault(field_ref, "apiVersion", "v1")


def _default_volume(volume: Obj) -> None:
    if not any(volume.get(src) is not None for src in VOLUME_SOURCES):
        volume["emptyDir"] = {}
    for src in _MODE_SOURCES:
        if isinstance(volume.get(src), dict):
            setdefault(volume[src], "defaultMode", 420)
    if isinstance(volume.get("hostPath"), dict):
        setdefault(volume["hostPath"], "type", "")


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and the container defaults: what every pod template gets."""
    setdefault(spec, "restartPolicy", "Always")
    setdefault(spec, "dnsPolicy", "ClusterFirst")
    setdefault(spec, "terminationGracePeriodSeconds", 30)
    setdefault(spec, "schedulerName", "default-scheduler")
    setdefault(spec, "securityContext", {})
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                default_container(container)
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _default_volume(volume)


def default_pod_template(template: Any) -> None:
    if isinstance(template, dict):
        spec = template.get("spec")
        if isinstance(spec, dict):
            default_pod_spec(spec)


def default_requests_to_limits(container: Obj) -> None:
    """SetDefaults_Pod's rule that a container's unset request of a resource it limits is the limit."""
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
        requests = resources.get("requests")
        if not isinstance(requests, dict):
            requests = resources["requests"] = {}
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def default_pod_only(spec: Obj) -> None:
    """Defaults upstream gives pods but not templates: SetDefaults_Pod, and the deprecated
    `serviceAccount` kept equal to `serviceAccountName` as v1's conversion does. What the
    ServiceAccount, Priority and DefaultTolerationSeconds admission plugins add is theirs."""
    setdefault(spec, "enableServiceLinks", True)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            default_requests_to_limits(container)
            if spec.get("hostNetwork"):
                for port in container.get("ports") or []:
                    if not port.get("hostPort"):
                        port["hostPort"] = port.get("containerPort")
    service_account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if service_account:
        spec["serviceAccountName"] = service_account
        spec["serviceAccount"] = service_account


def qos_class(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, computed like upstream's GetPodQOS."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        for name, value in (resources.get("requests") or {}).items():
            amount = _quantity_or_zero(value)
            if name in ("cpu", "memory") and amount > 0:
                requests[name] = requests.get(name, Decimal(0)) + amount
        found = set()
        for name, value in (resources.get("limits") or {}).items():
            amount = _quantity_or_zero(value)
            if name in ("cpu", "memory") and amount > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + amount
        if found != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def _quantity_or_zero(value: Any) -> Decimal:
    try:
        return v.parse_quantity(value)
    except ValueError:
        return Decimal(0)


# -- validation -------------------------------------------------------------------


def _validate_resources(resources: Any, path: str) -> list[Cause]:
    if not isinstance(resources, dict):
        return []
    causes: list[Cause] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    for kind, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            causes.extend(v.validate_quantity(value, f"{path}.{kind}[{name}]"))
    for name, value in requests.items():
        if name not in limits:
            continue
        try:
            if v.parse_quantity(value) > v.parse_quantity(limits[name]):
                causes.append(
                    v.invalid(f"{path}.requests[{name}]", value,
                              f"must be less than or equal to {name} limit of {limits[name]}")
                )
        except ValueError:
            continue
    return causes


def _validate_ports(ports: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in enumerate(ports or []):
        ppath = f"{path}[{i}]"
        name = port.get("name")
        if name:
            causes.extend(v.invalid(f"{ppath}.name", name, m) for m in v.is_valid_port_name(name))
            if name in names:
                causes.append(v.duplicate(f"{ppath}.name", name))
            names.add(name)
        container_port = port.get("containerPort")
        if not container_port:
            causes.append(v.required(f"{ppath}.containerPort"))
        else:
            causes.extend(v.invalid(f"{ppath}.containerPort", container_port, m)
                          for m in v.is_valid_port_num(container_port))
        host_port = port.get("hostPort")
        if host_port:
            causes.extend(v.invalid(f"{ppath}.hostPort", host_port, m) for m in v.is_valid_port_num(host_port))
        protocol = port.get("protocol") or ""
        if not protocol:
            causes.append(v.required(f"{ppath}.protocol"))
        elif protocol not in PROTOCOLS:
            causes.append(v.not_supported(f"{ppath}.protocol", protocol, PROTOCOLS))
    return causes


def _validate_env(env: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, var in enumerate(env or []):
        name = var.get("name") or ""
        if not name:
            causes.append(v.required(f"{path}[{i}].name"))
        else:
            causes.extend(v.invalid(f"{path}[{i}].name", name, m) for m in v.is_env_var_name(name))
    return causes


def validate_container(container: Obj, path: str, volumes: set[str], is_pod: bool) -> list[Cause]:
    """The checks every container passes, wherever in a pod (or template) it is declared."""
    causes: list[Cause] = []
    image = container.get("image") or ""
    if not image:
        causes.append(v.required(f"{path}.image"))
    elif is_pod and image != image.strip():
        causes.append(v.invalid(f"{path}.image", image, "must not have leading or trailing whitespace"))
    policy = container.get("imagePullPolicy") or ""
    if not policy:
        causes.append(v.required(f"{path}.imagePullPolicy"))
    elif policy not in PULL_POLICIES:
        causes.append(v.not_supported(f"{path}.imagePullPolicy", policy, PULL_POLICIES))
    message_policy = container.get("terminationMessagePolicy") or ""
    if not message_policy:
        causes.append(v.required(f"{path}.terminationMessagePolicy"))
    elif message_policy not in ("File", "FallbackToLogsOnError"):
        causes.append(
            v.invalid(f"{path}.terminationMessagePolicy", message_policy,
                      "must be 'File' or 'FallbackToLogsOnError'")
        )
    causes.extend(_validate_ports(container.get("ports"), f"{path}.ports"))
    causes.extend(_validate_env(container.get("env"), f"{path}.env"))
    causes.extend(_validate_resources(container.get("resources"), f"{path}.resources"))
    mount_paths: set[str] = set()
    for i, mount in enumerate(container.get("volumeMounts") or []):
        mpath = f"{path}.volumeMounts[{i}]"
        name = mount.get("name") or ""
        if not name:
            causes.append(v.required(f"{mpath}.name"))
        elif name not in volumes:
            causes.append(v.not_found(f"{mpath}.name", name))
        mount_path = mount.get("mountPath") or ""
        if not mount_path:
            causes.append(v.required(f"{mpath}.mountPath"))
        elif mount_path in mount_paths:
            causes.append(v.invalid(f"{mpath}.mountPath", mount_path, "must be unique"))
        mount_paths.add(mount_path)
    return causes


def _validate_tolerations(tolerations: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, tol in enumerate(tolerations or []):
        tpath = f"{path}[{i}]"
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if key:
            causes.extend(v.invalid(f"{tpath}.key", key, m) for m in v.is_qualified_name(key))
        elif operator != "Exists":
            causes.append(
                v.invalid(f"{tpath}.operator", operator,
                          "operator must be Exists when `key` is empty, which means \"match all values and all keys\"")
            )
        if operator not in TOLERATION_OPERATORS:
            causes.append(v.not_supported(f"{tpath}.operator", operator, TOLERATION_OPERATORS))
        elif operator == "Exists" and tol.get("value"):
            causes.append(v.invalid(f"{tpath}.operator", tol["value"],
                                    "value must be empty when `operator` is 'Exists'"))
        effect = tol.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            causes.append(v.not_supported(f"{tpath}.effect", effect, TAINT_EFFECTS))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(v.invalid(f"{tpath}.effect", effect,
                                    "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    return causes


#: Also what RuntimeClass's scheduling.tolerations must satisfy.
validate_tolerations = _validate_tolerations


def validate_pod_spec(spec: Any, path: str = "spec", is_pod: bool = True,
                      claim_volumes: Iterable[str] = ()) -> list[Cause]:
    """Upstream's ValidatePodSpec for the fields users set. `claim_volumes` are volumes the pod will get
    from elsewhere (a StatefulSet's claim templates), which mounts may name too."""
    if not isinstance(spec, dict):
        return [v.required(path)]
    causes: list[Cause] = []
    volume_names: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name") or ""
        vpath = f"{path}.volumes[{i}].name"
        if not name:
            causes.append(v.required(vpath))
        else:
            causes.extend(v.invalid(vpath, name, m) for m in v.is_dns1123_label(name))
            if name in volume_names:
                causes.append(v.duplicate(vpath, name))
        volume_names.add(name)
        sources = [src for src in VOLUME_SOURCES if volume.get(src) is not None]
        if len(sources) > 1:
            causes.append(v.forbidden(f"{path}.volumes[{i}].{sources[1]}", "may not specify more than 1 volume type"))
    mountable = volume_names | set(claim_volumes)
    containers = spec.get("containers") or []
    if not containers:
        causes.append(v.required(f"{path}.containers"))
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            cpath = f"{path}.{key}[{i}]"
            name = container.get("name") or ""
            if not name:
                causes.append(v.required(f"{cpath}.name"))
            else:
                causes.extend(v.invalid(f"{cpath}.name", name, m) for m in v.is_dns1123_label(name))
                if name in names:
                    causes.append(v.duplicate(f"{cpath}.name", name))
            names.add(name)
            causes.extend(validate_container(container, cpath, mountable, is_pod))
    restart = spec.get("restartPolicy") or ""
    if not restart:
        causes.append(v.required(f"{path}.restartPolicy"))
    elif restart not in RESTART_POLICIES:
        causes.append(v.not_supported(f"{path}.restartPolicy", restart, RESTART_POLICIES))
    dns = spec.get("dnsPolicy") or ""
    if not dns:
        causes.append(v.required(f"{path}.dnsPolicy"))
    elif dns not in DNS_POLICIES:
        causes.append(v.not_supported(f"{path}.dnsPolicy", dns, DNS_POLICIES))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not (isinstance(deadline, int) and 1 <= deadline <= 2**31 - 1):
        causes.append(v.invalid(f"{path}.activeDeadlineSeconds", deadline,
                                "must be between 1 and 2147483647, inclusive"))
    causes.extend(v.validate_nonnegative(spec.get("terminationGracePeriodSeconds"),
                                         f"{path}.terminationGracePeriodSeconds"))
    causes.extend(v.validate_labels(spec.get("nodeSelector"), f"{path}.nodeSelector"))
    node_name = spec.get("nodeName")
    if node_name:
        causes.extend(v.invalid(f"{path}.nodeName", node_name, m) for m in v.is_dns1123_subdomain(node_name))
    service_account = spec.get("serviceAccountName")
    if service_account:
        causes.extend(v.invalid(f"{path}.serviceAccountName", service_account, m)
                      for m in v.is_dns1123_subdomain(service_account))
    causes.extend(_validate_tolerations(spec.get("tolerations"), f"{path}.tolerations"))
    causes.extend(validate_sysctls(spec, path))
    return causes


def validate_pod_template(template: Any, path: str, claim_volumes: Iterable[str] = ()) -> list[Cause]:
    if not isinstance(template, dict):
        return [v.required(path)]
    meta = template.get("metadata") or {}
    causes = v.validate_labels(meta.get("labels"), f"{path}.metadata.labels")
    causes += v.validate_annotations(meta.get("annotations"), f"{path}.metadata.annotations")
    causes += validate_pod_spec(template.get("spec"), f"{path}.spec", is_pod=False, claim_volumes=claim_volumes)
    return causes


POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def validate_pod_spec_update(new: Obj, old: Obj) -> list[Cause]:
    """The mutable parts of a pod's spec; everything else must stay as it was."""
    causes: list[Cause] = []
    new_deadline, old_deadline = new.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds")
    if old_deadline is not None:
        if new_deadline is None:
            causes.append(v.invalid("spec.activeDeadlineSeconds", None,
                                    "must not update from a positive integer to nil value"))
        elif new_deadline > old_deadline:
            causes.append(v.invalid("spec.activeDeadlineSeconds", new_deadline,
                                    "must be less than or equal to previous value"))
    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    for tol in old_tolerations:
        if tol not in new_tolerations:
            causes.append(v.forbidden("spec.tolerations", "existing toleration can not be modified except its "
                                                          "tolerationSeconds"))
            break
    mutable_new = copy.deepcopy(new)
    mutable_old = copy.deepcopy(old)
    for spec in (mutable_new, mutable_old):
        for key in ("activeDeadlineSeconds", "tolerations"):
            spec.pop(key, None)
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                container.pop("image", None)
        spec.pop("schedulingGates", None)
    old_grace = old.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and new.get("terminationGracePeriodSeconds") == 1:
        mutable_new["terminationGracePeriodSeconds"] = old_grace
    for key in ("initContainers", "containers"):
        if len(new.get(key) or []) == len(old.get(key) or []):
            for i, container in enumerate(new.get(key) or []):
                if not container.get("image"):
                    causes.append(v.required(f"spec.{key}[{i}].image"))
    new_gates = new.get("schedulingGates") or []
    old_gates = old.get("schedulingGates") or []
    if any(g not in old_gates for g in new_gates):
        causes.append(v.forbidden("spec.schedulingGates", "only deletion is allowed, but found new scheduling gate"))
    if mutable_new != mutable_old:
        causes.append(v.forbidden("spec", POD_UPDATE_FORBIDDEN))
    return causes

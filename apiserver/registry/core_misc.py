"""The smaller core/v1 resources: ConfigMap, Secret, ServiceAccount, PersistentVolume(Claim),
LimitRange, ResourceQuota, PodTemplate and Endpoints."""

from __future__ import annotations

import base64
import binascii
import ipaddress
from datetime import UTC, datetime
from decimal import Decimal

from apiserver.registry.base import MetaStrategy, child, get, setdefault
from apiserver.registry.podspec import PROTOCOLS, default_pod_template, validate_pod_template
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v
from services.api.quantity import canonicalize_quantity, parse_quantity

MAX_DATA_SIZE = 1024 * 1024
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
RECLAIM_POLICIES = ("Delete", "Recycle", "Retain")
VOLUME_MODES = ("Block", "Filesystem")
SERVICE_ACCOUNT_NAME_ANNOTATION = "kubernetes.io/service-account.name"
_SECRET_REQUIRED_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}


def _validate_immutable_data(new: Obj, old: Obj) -> list[Cause]:
    """ConfigMaps and Secrets marked immutable keep their data and the mark itself."""
    if not old.get("immutable"):
        return []
    causes = []
    if not new.get("immutable"):
        causes.append(v.forbidden("immutable", "field is immutable when `immutable` is set"))
    if new.get("data") != old.get("data") or new.get("binaryData") != old.get("binaryData"):
        causes.append(v.forbidden("data", "field is immutable when `immutable` is set"))
    return causes


class ConfigMapStrategy(MetaStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        total = 0
        data = obj.get("data") or {}
        binary = obj.get("binaryData") or {}
        for key, value in data.items():
            causes.extend(v.invalid(f"data[{key}]", key, m) for m in v.is_config_map_key(key))
            if key in binary:
                causes.append(v.invalid(f"data[{key}]", key, "duplicate of key present in binaryData"))
            total += len(str(value).encode())
        for key, value in binary.items():
            causes.extend(v.invalid(f"binaryData[{key}]", key, m) for m in v.is_config_map_key(key))
            total += len(str(value)) * 3 // 4
        if total > MAX_DATA_SIZE:
            causes.append(v.too_long("", MAX_DATA_SIZE))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return self.validate_spec(new) + _validate_immutable_data(new, old)


class SecretStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        """type defaults to Opaque; stringData is write-only and merges into data, as in upstream's conversion."""
        setdefault(obj, "type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            data = obj.get("data")
            if not isinstance(data, dict):
                data = obj["data"] = {}
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        total = 0
        data = obj.get("data") or {}
        for key, value in data.items():
            causes.extend(v.invalid(f"data[{key}]", key, m) for m in v.is_config_map_key(key))
            try:
                total += len(base64.b64decode(value or "", validate=True))
            except (binascii.Error, TypeError, ValueError):
                causes.append(v.invalid(f"data[{key}]", "<secret contents redacted>",
                                        "must be a base64-encoded value"))
        if total > MAX_DATA_SIZE:
            causes.append(v.too_long("data", MAX_DATA_SIZE))
        kind = obj.get("type") or ""
        if kind == "kubernetes.io/service-account-token":
            if not get(obj, "metadata", "annotations", SERVICE_ACCOUNT_NAME_ANNOTATION):
                causes.append(v.required(f"metadata.annotations[{SERVICE_ACCOUNT_NAME_ANNOTATION}]"))
        for key in _SECRET_REQUIRED_KEYS.get(kind, ()):
            if key not in data:
                causes.append(v.required(f"data[{key}]"))
        if kind == "kubernetes.io/basic-auth" and "username" not in data and "password" not in data:
            causes.append(v.required("data[username]"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new) + _validate_immutable_data(new, old)
        causes.extend(v.validate_immutable(new.get("type"), old.get("type"), "type"))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["type"] = obj.get("type") or ""
        return fields


class ServiceAccountStrategy(MetaStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        for i, ref in enumerate(obj.get("secrets") or []):
            if not ref.get("name"):
                causes.append(v.required(f"secrets[{i}].name"))
        return causes


def _validate_access_modes(modes: list[str], path: str) -> list[Cause]:
    causes = []
    if not modes:
        causes.append(v.required(path, "at least 1 access mode is required"))
    for mode in modes:
        if mode not in ACCESS_MODES:
            causes.append(v.not_supported(path, mode, ACCESS_MODES))
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        causes.append(v.forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return causes


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PersistentVolumeStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        setdefault(spec, "persistentVolumeReclaimPolicy", "Retain")
        setdefault(spec, "volumeMode", "Filesystem")

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": _now()}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes = _validate_access_modes(spec.get("accessModes") or [], "spec.accessModes")
        capacity = spec.get("capacity") or {}
        if not capacity:
            causes.append(v.required("spec.capacity"))
        elif "storage" not in capacity or len(capacity) > 1:
            causes.append(v.not_supported("spec.capacity", sorted(capacity), ("storage",)))
        else:
            causes.extend(v.validate_quantity(capacity["storage"], "spec.capacity[storage]"))
        policy = spec.get("persistentVolumeReclaimPolicy") or ""
        if policy not in RECLAIM_POLICIES:
            causes.append(v.not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
        mode = spec.get("volumeMode")
        if mode is not None and mode not in VOLUME_MODES:
            causes.append(v.not_supported("spec.volumeMode", mode, VOLUME_MODES))
        sources = [key for key in spec if key in _PV_SOURCES]
        if not sources:
            causes.append(v.required("spec", "must specify a volume type"))
        elif len(sources) > 1:
            causes.append(v.forbidden(f"spec.{sources[1]}", "may not specify more than 1 volume type"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        for key in _PV_SOURCES:
            if key in old_spec and new_spec.get(key) != old_spec.get(key):
                causes.append(v.forbidden("spec.persistentvolumesource",
                                          "spec.persistentvolumesource is immutable after creation"))
                break
        causes.extend(v.validate_immutable(new_spec.get("volumeMode"), old_spec.get("volumeMode"), "volumeMode"))
        return causes


_PV_SOURCES = (
    "gcePersistentDisk", "awsElasticBlockStore", "hostPath", "glusterfs", "nfs", "rbd", "iscsi", "cinder",
    "cephfs", "fc", "flocker", "flexVolume", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "local", "storageos", "csi",
)


class PersistentVolumeClaimStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        setdefault(child(obj, "spec"), "volumeMode", "Filesystem")

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending"}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes = _validate_access_modes(spec.get("accessModes") or [], "spec.accessModes")
        requests = get(spec, "resources", "requests", default={})
        if "storage" not in requests:
            causes.append(v.required("spec.resources[storage]"))
        else:
            quantity_causes = v.validate_quantity(requests["storage"], "spec.resources.requests[storage]")
            causes.extend(quantity_causes)
            if not quantity_causes and v.parse_quantity(requests["storage"]) <= 0:
                causes.append(v.invalid("spec.resources.requests[storage]", requests["storage"],
                                        "must be greater than zero"))
        causes.extend(v.validate_label_selector(spec.get("selector"), "spec.selector"))
        mode = spec.get("volumeMode")
        if mode is not None and mode not in VOLUME_MODES:
            causes.append(v.not_supported("spec.volumeMode", mode, VOLUME_MODES))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        new_spec = dict(new.get("spec") or {})
        old_spec = dict(old.get("spec") or {})
        for spec in (new_spec, old_spec):
            spec.pop("resources", None)
            spec.pop("volumeAttributesClassName", None)
        if not old_spec.get("volumeName"):
            new_spec.pop("volumeName", None)
            old_spec.pop("volumeName", None)
        # Retroactive default StorageClass (upstream 1.28+): a claim created with no class at all may be
        # given one later, once; "" and any class already set stay fixed.
        if old_spec.get("storageClassName") is None and new_spec.get("storageClassName") and \
                "volume.beta.kubernetes.io/storage-class" not in (get(old, "metadata", "annotations") or {}):
            new_spec.pop("storageClassName")
        if new_spec != old_spec:
            causes.append(v.forbidden("spec", "spec is immutable after creation except resources.requests and "
                                              "volumeAttributesClassName for bound claims"))
        return causes


class LimitRangeStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        """SetDefaults_LimitRangeItem: a Container item's default limit is its max, its default request
        the default limit, else the min."""
        for item in get(obj, "spec", "limits", default=[]):
            if not isinstance(item, dict) or item.get("type") != LIMIT_CONTAINER:
                continue
            default = dict(item.get("default") or {})
            request = dict(item.get("defaultRequest") or {})
            for name, value in (item.get("max") or {}).items():
                default.setdefault(name, value)
            for name, value in [*default.items(), *(item.get("min") or {}).items()]:
                request.setdefault(name, value)
            if default:
                item["default"] = default
            if request:
                item["defaultRequest"] = request

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        seen: set[str] = set()
        for i, item in enumerate(get(obj, "spec", "limits", default=[])):
            causes.extend(_validate_limit_range_item(item, f"spec.limits[{i}]", seen))
        return causes


LIMIT_CONTAINER = "Container"
LIMIT_POD = "Pod"
LIMIT_CLAIM = "PersistentVolumeClaim"
_LIMIT_TYPES = (LIMIT_CONTAINER, LIMIT_POD, LIMIT_CLAIM)
_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_STANDARD_RESOURCES = frozenset({
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "services", "replicationcontrollers",
    "resourcequotas", "secrets", "configmaps", "persistentvolumeclaims", "storage", "requests.storage",
    "services.nodeports", "services.loadbalancers",
})
_LIMIT_KEYS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


def _validate_resource_name(name: str, path: str) -> list[Cause]:
    """Upstream's validateResourceName: qualified, and standard unless it has a domain."""
    causes = [v.invalid(path, name, m) for m in v.is_qualified_name(name)]
    if causes:
        return causes
    hugepages = name.startswith(("hugepages-", "requests.hugepages-"))
    if "/" not in name and name not in _STANDARD_RESOURCES and not hugepages:
        return [v.invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def _validate_container_resource_name(name: str, path: str) -> list[Cause]:
    """Upstream's validateContainerResourceName: what a Pod or Container item may bound."""
    causes = _validate_resource_name(name, path)
    if "/" not in name:
        if name not in _CONTAINER_RESOURCES and not name.startswith("hugepages-"):
            causes.append(v.invalid(path, name, "must be a standard resource for containers"))
    elif "kubernetes.io/" not in name and (name.startswith("requests.") or v.is_qualified_name(f"requests.{name}")):
        causes.append(v.invalid(path, name, "doesn't follow extended resource name standard"))
    return causes


def _overcommit_allowed(name: str) -> bool:
    """cpu, memory and the like may be requested below their limit; hugepages and extended resources not."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def _validate_limit_range_item(item: Obj, path: str, seen: set[str]) -> list[Cause]:
    """Upstream's ValidateLimitRange for one item of spec.limits, in its order of checks."""
    if not isinstance(item, dict):
        return [v.invalid(path, item, "must be an object")]
    causes: list[Cause] = []
    kind = item.get("type") or ""
    type_errors = [v.invalid(f"{path}.type", kind, m) for m in v.is_qualified_name(kind)]
    if not type_errors and "/" not in kind and kind not in _LIMIT_TYPES:
        type_errors = [v.invalid(f"{path}.type", kind, "must be a standard limit type or fully qualified")]
    causes += type_errors
    if kind in seen:
        causes.append(v.duplicate(f"{path}.type", kind))
    seen.add(kind)
    check_name = _validate_container_resource_name if kind in (LIMIT_CONTAINER, LIMIT_POD) else \
        _validate_resource_name
    values: dict[str, dict[str, Decimal]] = {key: {} for key in _LIMIT_KEYS}
    texts: dict[str, dict[str, str]] = {key: {} for key in _LIMIT_KEYS}
    keys: set[str] = set()

    def take(key: str) -> None:
        for name, value in (item.get(key) or {}).items():
            causes.extend(check_name(name, f"{path}.{key}[{name}]"))
            bad = v.validate_quantity(value, f"{path}.{key}[{name}]")
            causes.extend(bad)
            keys.add(name)
            if not bad:
                values[key][name] = parse_quantity(value)
                texts[key][name] = canonicalize_quantity(value)

    take("max")
    take("min")
    if kind == LIMIT_POD:
        for key in ("default", "defaultRequest"):
            if item.get(key):
                causes.append(v.forbidden(f"{path}.{key}", "may not be specified when `type` is 'Pod'"))
    else:
        take("default")
        take("defaultRequest")
    if kind == LIMIT_CLAIM and "storage" not in (item.get("min") or {}) and "storage" not in (item.get("max") or {}):
        causes.append(v.required(f"{path}.limits", "either minimum or maximum storage value is required, but "
                                                   "neither was provided"))
    take("maxLimitRequestRatio")
    for name in sorted(keys):
        causes.extend(_compare_limits(path, name, {k: values[k].get(name) for k in _LIMIT_KEYS},
                                      {k: texts[k].get(name, "") for k in _LIMIT_KEYS}))
    return causes


def _compare_limits(path: str, name: str, q: dict[str, Decimal | None], s: dict[str, str]) -> list[Cause]:
    """min <= defaultRequest <= default <= max, a ratio of at least 1 and at most max/min, and no
    overcommit of a resource that allows none."""
    lo, hi, default, request, ratio = q["min"], q["max"], q["default"], q["defaultRequest"], q["maxLimitRequestRatio"]
    causes: list[Cause] = []
    if lo is not None and hi is not None and lo > hi:
        causes.append(v.invalid(f"{path}.min[{name}]", s["min"], f"min value {s['min']} is greater than max value "
                                                                  f"{s['max']}"))
    if request is not None and lo is not None and lo > request:
        causes.append(v.invalid(f"{path}.defaultRequest[{name}]", s["defaultRequest"],
                                f"min value {s['min']} is greater than default request value {s['defaultRequest']}"))
    if request is not None and hi is not None and request > hi:
        causes.append(v.invalid(f"{path}.defaultRequest[{name}]", s["defaultRequest"],
                                f"default request value {s['defaultRequest']} is greater than max value {s['max']}"))
    if request is not None and default is not None and request > default:
        causes.append(v.invalid(f"{path}.defaultRequest[{name}]", s["defaultRequest"],
                                f"default request value {s['defaultRequest']} is greater than default limit value "
                                f"{s['default']}"))
    if default is not None and lo is not None and lo > default:
        causes.append(v.invalid(f"{path}.default[{name}]", s["min"],
                                f"min value {s['min']} is greater than default value {s['default']}"))
    if default is not None and hi is not None and default > hi:
        causes.append(v.invalid(f"{path}.default[{name}]", s["max"],
                                f"default value {s['default']} is greater than max value {s['max']}"))
    if ratio is not None and ratio < 1:
        causes.append(v.invalid(f"{path}.maxLimitRequestRatio[{name}]", s["maxLimitRequestRatio"],
                                f"ratio {s['maxLimitRequestRatio']} is less than 1"))
    if ratio is not None and lo is not None and hi is not None and lo > 0:
        bound = float(hi) / float(lo)
        if float(ratio) > bound:
            causes.append(v.invalid(f"{path}.maxLimitRequestRatio[{name}]", s["maxLimitRequestRatio"],
                                    f"ratio {s['maxLimitRequestRatio']} is greater than max/min = {bound:f}"))
    if not _overcommit_allowed(name) and default is not None and request is not None and default != request:
        causes.append(v.invalid(f"{path}.defaultRequest[{name}]", s["defaultRequest"],
                                f"default value {s['default']} must equal to defaultRequest value "
                                f"{s['defaultRequest']} in {name}"))
    return causes


class ResourceQuotaStrategy(MetaStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        for name, value in (get(obj, "spec", "hard", default={})).items():
            causes.extend(v.validate_quantity(value, f"spec.hard[{name}]"))
        scopes = get(obj, "spec", "scopes", default=[])
        for scope in scopes:
            if scope not in _QUOTA_SCOPES:
                causes.append(v.not_supported("spec.scopes", scope, _QUOTA_SCOPES))
        exprs = get(obj, "spec", "scopeSelector", "matchExpressions", default=[])
        for i, expr in enumerate(exprs):
            causes.extend(_validate_scope_requirement(expr, f"spec.scopeSelector.matchExpressions[{i}]"))
        return causes


def _validate_scope_requirement(expr: Obj, path: str) -> list[Cause]:
    """A scopeSelector requirement, as upstream's validateScopedResourceSelectorRequirement checks it."""
    scope, op, values = expr.get("scopeName"), expr.get("operator"), expr.get("values") or []
    if scope not in _QUOTA_SCOPES:
        return [v.not_supported(f"{path}.scopeName", scope, _QUOTA_SCOPES)]
    if op not in _SCOPE_OPERATORS:
        return [v.not_supported(f"{path}.operator", op, _SCOPE_OPERATORS)]
    if scope not in ("PriorityClass", "VolumeAttributesClass") and op not in ("Exists", "DoesNotExist"):
        return [v.invalid(f"{path}.operator", op,
                          "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, "
                          "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, "
                          "ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity")]
    if op in ("In", "NotIn") and not values:
        return [v.required(f"{path}.values", "must be at least one value when `operator` is 'In' or 'NotIn' "
                                             "for scope selector")]
    if op in ("Exists", "DoesNotExist") and values:
        return [v.invalid(f"{path}.values", values, "must be no value when `operator` is 'Exist' or "
                                                    "'DoesNotExist' for scope selector")]
    return []


_SCOPE_OPERATORS = ("DoesNotExist", "Exists", "In", "NotIn")
_QUOTA_SCOPES = ("BestEffort", "CrossNamespacePodAffinity", "NotBestEffort", "NotTerminating", "PriorityClass",
                 "Terminating", "VolumeAttributesClass")


class PodTemplateStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        default_pod_template(obj.get("template"))

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return validate_pod_template(obj.get("template"), "template")


def _validate_ip(ip: str, path: str) -> list[Cause]:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return [v.invalid(path, ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
    return []


def validate_endpoint_port(port: Obj, path: str, name_required: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = port.get("name") or ""
    if name:
        causes.extend(v.invalid(f"{path}.name", name, m) for m in v.is_dns1123_label(name))
    elif name_required:
        causes.append(v.required(f"{path}.name"))
    number = port.get("port")
    if number is not None:
        causes.extend(v.invalid(f"{path}.port", number, m) for m in v.is_valid_port_num(number))
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        causes.append(v.not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    return causes


class EndpointsStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        for subset in obj.get("subsets") or []:
            for port in subset.get("ports") or []:
                setdefault(port, "protocol", "TCP")

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        for i, subset in enumerate(obj.get("subsets") or []):
            path = f"subsets[{i}]"
            for key in ("addresses", "notReadyAddresses"):
                for j, address in enumerate(subset.get(key) or []):
                    causes.extend(_validate_ip(address.get("ip") or "", f"{path}.{key}[{j}].ip"))
            ports = subset.get("ports") or []
            for j, port in enumerate(ports):
                causes.extend(validate_endpoint_port(port, f"{path}.ports[{j}]", len(ports) > 1))
        return causes

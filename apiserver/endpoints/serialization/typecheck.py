"""Built-in objects decoded as upstream's Go decoder decodes them: wrong JSON types refused, nulls read.

Upstream decodes a request body into the Go struct of its kind before anything else runs, so a
`replicas: "3"` or a `data` value that is a number never reaches validation: the decoder answers
400 `Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string
into Go struct field DeploymentSpec.spec.replicas of type int32`. Here the same knowledge comes
from upstream's OpenAPI definitions (the ones `fieldvalidation` loads), compiled once per kind
into a tree of expected JSON types, with the Go type names the messages quote.

Go's decoder keeps the first plain type mismatch and goes on; a failure inside a type with its
own decoder (IntOrString, Quantity, Time) stops it at once and wins over an earlier mismatch.

A JSON null leaves a Go field unset, so the same walk takes every null out as the typed round trip
would: an optional field that is null is dropped (Go omits it again on output), a required scalar
field gets its zero value (`""`, `0`, `false`, as Go writes a field without omitempty), and a null
element of a list or a null value of a map becomes the zero value of its type, a struct's being `{}`
with its required scalars zeroed, which validation then names precisely (`spec.containers[0].name:
Required value`). Without this a stored null would make two equal templates hash apart.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

from apiserver.endpoints.serialization.fieldvalidation import _definitions
from services.api import errors
from services.api.errors import StatusError
from services.api.quantity import parse_quantity

_REF = "#/$defs/"
_INTSTR = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_MICROTIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

# Types whose Go decoders take any JSON.
_OPAQUE = frozenset({
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
})

# Go types of fields the definitions describe only by their JSON shape: named string types
# (enums, types.UID) and named maps and lists, read off upstream's 1.32 Go sources (k8s.io/api,
# apimachinery, apiextensions-apiserver) for the built-in kinds served here. One struct a line
# (definition name without `io.k8s.`), `jsonField=GoType` pairs, indented lines continue.
_GO_TYPES_TEXT = """
api.apps.v1.DaemonSetCondition: status=v1.ConditionStatus type=v1.DaemonSetConditionType
api.apps.v1.DaemonSetUpdateStrategy: type=v1.DaemonSetUpdateStrategyType
api.apps.v1.DeploymentCondition: status=v1.ConditionStatus type=v1.DeploymentConditionType
api.apps.v1.DeploymentStrategy: type=v1.DeploymentStrategyType
api.apps.v1.ReplicaSetCondition: status=v1.ConditionStatus type=v1.ReplicaSetConditionType
api.apps.v1.StatefulSetCondition: status=v1.ConditionStatus type=v1.StatefulSetConditionType
api.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy:
    whenDeleted=v1.PersistentVolumeClaimRetentionPolicyType
    whenScaled=v1.PersistentVolumeClaimRetentionPolicyType
api.apps.v1.StatefulSetSpec: podManagementPolicy=v1.PodManagementPolicyType
api.apps.v1.StatefulSetUpdateStrategy: type=v1.StatefulSetUpdateStrategyType
api.authentication.v1.UserInfo: extra=map[string]v1.ExtraValue
api.authorization.v1.SubjectAccessReviewSpec: extra=map[string]v1.ExtraValue
api.autoscaling.v2.ContainerResourceMetricSource: name=v1.ResourceName
api.autoscaling.v2.ContainerResourceMetricStatus: name=v1.ResourceName
api.autoscaling.v2.HPAScalingPolicy: type=v2.HPAScalingPolicyType
api.autoscaling.v2.HPAScalingRules: selectPolicy=v2.ScalingPolicySelect
api.autoscaling.v2.HorizontalPodAutoscalerCondition: status=v1.ConditionStatus
    type=v2.HorizontalPodAutoscalerConditionType
api.autoscaling.v2.MetricSpec: type=v2.MetricSourceType
api.autoscaling.v2.MetricStatus: type=v2.MetricSourceType
api.autoscaling.v2.MetricTarget: type=v2.MetricTargetType
api.autoscaling.v2.ResourceMetricSource: name=v1.ResourceName
api.autoscaling.v2.ResourceMetricStatus: name=v1.ResourceName
api.batch.v1.CronJobSpec: concurrencyPolicy=v1.ConcurrencyPolicy
api.batch.v1.JobCondition: status=v1.ConditionStatus type=v1.JobConditionType
api.batch.v1.JobSpec: completionMode=v1.CompletionMode podReplacementPolicy=v1.PodReplacementPolicy
api.batch.v1.PodFailurePolicyOnExitCodesRequirement: operator=v1.PodFailurePolicyOnExitCodesOperator
api.batch.v1.PodFailurePolicyOnPodConditionsPattern: status=v1.ConditionStatus type=v1.PodConditionType
api.batch.v1.PodFailurePolicyRule: action=v1.PodFailurePolicyAction
api.batch.v1.UncountedTerminatedPods: failed=[]types.UID succeeded=[]types.UID
api.coordination.v1.LeaseSpec: strategy=v1.CoordinatedLeaseStrategy
api.core.v1.AppArmorProfile: type=v1.AppArmorProfileType
api.core.v1.AttachedVolume: name=v1.UniqueVolumeName
api.core.v1.AzureDiskVolumeSource: cachingMode=v1.AzureDataDiskCachingMode kind=v1.AzureDataDiskKind
api.core.v1.Capabilities: add=[]v1.Capability drop=[]v1.Capability
api.core.v1.ConfigMapNodeConfigSource: uid=types.UID
api.core.v1.Container: imagePullPolicy=v1.PullPolicy restartPolicy=v1.ContainerRestartPolicy
    terminationMessagePolicy=v1.TerminationMessagePolicy
api.core.v1.ContainerPort: protocol=v1.Protocol
api.core.v1.ContainerResizePolicy: resourceName=v1.ResourceName
    restartPolicy=v1.ResourceResizeRestartPolicy
api.core.v1.ContainerStatus: allocatedResources=v1.ResourceList
api.core.v1.EmptyDirVolumeSource: medium=v1.StorageMedium
api.core.v1.EndpointPort: protocol=v1.Protocol
api.core.v1.EphemeralContainer: imagePullPolicy=v1.PullPolicy restartPolicy=v1.ContainerRestartPolicy
    terminationMessagePolicy=v1.TerminationMessagePolicy
api.core.v1.HTTPGetAction: scheme=v1.URIScheme
api.core.v1.HostPathVolumeSource: type=v1.HostPathType
api.core.v1.ImageVolumeSource: pullPolicy=v1.PullPolicy
api.core.v1.LimitRangeItem: default=v1.ResourceList defaultRequest=v1.ResourceList max=v1.ResourceList
    maxLimitRequestRatio=v1.ResourceList min=v1.ResourceList type=v1.LimitType
api.core.v1.LoadBalancerIngress: ipMode=v1.LoadBalancerIPMode
api.core.v1.ModifyVolumeStatus: status=v1.PersistentVolumeClaimModifyVolumeStatus
api.core.v1.NamespaceCondition: status=v1.ConditionStatus type=v1.NamespaceConditionType
api.core.v1.NamespaceSpec: finalizers=[]v1.FinalizerName
api.core.v1.NamespaceStatus: phase=v1.NamespacePhase
api.core.v1.NodeAddress: type=v1.NodeAddressType
api.core.v1.NodeCondition: status=v1.ConditionStatus type=v1.NodeConditionType
api.core.v1.NodeSelectorRequirement: operator=v1.NodeSelectorOperator
api.core.v1.NodeStatus: allocatable=v1.ResourceList capacity=v1.ResourceList phase=v1.NodePhase
    volumesInUse=[]v1.UniqueVolumeName
api.core.v1.ObjectReference: uid=types.UID
api.core.v1.PersistentVolumeClaimCondition: status=v1.ConditionStatus
    type=v1.PersistentVolumeClaimConditionType
api.core.v1.PersistentVolumeClaimSpec: accessModes=[]v1.PersistentVolumeAccessMode
    volumeMode=v1.PersistentVolumeMode
api.core.v1.PersistentVolumeClaimStatus: accessModes=[]v1.PersistentVolumeAccessMode
    allocatedResourceStatuses=map[v1.ResourceName]v1.ClaimResourceStatus
    allocatedResources=v1.ResourceList capacity=v1.ResourceList phase=v1.PersistentVolumeClaimPhase
api.core.v1.PersistentVolumeSpec: accessModes=[]v1.PersistentVolumeAccessMode capacity=v1.ResourceList
    persistentVolumeReclaimPolicy=v1.PersistentVolumeReclaimPolicy volumeMode=v1.PersistentVolumeMode
api.core.v1.PersistentVolumeStatus: phase=v1.PersistentVolumePhase
api.core.v1.PodCondition: status=v1.ConditionStatus type=v1.PodConditionType
api.core.v1.PodOS: name=v1.OSName
api.core.v1.PodReadinessGate: conditionType=v1.PodConditionType
api.core.v1.PodSecurityContext: fsGroupChangePolicy=v1.PodFSGroupChangePolicy
    seLinuxChangePolicy=v1.PodSELinuxChangePolicy supplementalGroupsPolicy=v1.SupplementalGroupsPolicy
api.core.v1.PodSpec: dnsPolicy=v1.DNSPolicy overhead=v1.ResourceList
    preemptionPolicy=v1.PreemptionPolicy restartPolicy=v1.RestartPolicy
api.core.v1.PodStatus: phase=v1.PodPhase qosClass=v1.PodQOSClass resize=v1.PodResizeStatus
api.core.v1.PortStatus: protocol=v1.Protocol
api.core.v1.ReplicationControllerCondition: status=v1.ConditionStatus
    type=v1.ReplicationControllerConditionType
api.core.v1.ResourceHealth: health=v1.ResourceHealthStatus resourceID=v1.ResourceID
api.core.v1.ResourceQuotaSpec: hard=v1.ResourceList scopes=[]v1.ResourceQuotaScope
api.core.v1.ResourceQuotaStatus: hard=v1.ResourceList used=v1.ResourceList
api.core.v1.ResourceRequirements: limits=v1.ResourceList requests=v1.ResourceList
api.core.v1.ResourceStatus: name=v1.ResourceName
api.core.v1.ScopedResourceSelectorRequirement: operator=v1.ScopeSelectorOperator
    scopeName=v1.ResourceQuotaScope
api.core.v1.SeccompProfile: type=v1.SeccompProfileType
api.core.v1.Secret: type=v1.SecretType
api.core.v1.SecurityContext: procMount=v1.ProcMountType
api.core.v1.ServicePort: protocol=v1.Protocol
api.core.v1.ServiceSpec: externalTrafficPolicy=v1.ServiceExternalTrafficPolicy
    internalTrafficPolicy=v1.ServiceInternalTrafficPolicy ipFamilies=[]v1.IPFamily
    ipFamilyPolicy=v1.IPFamilyPolicy sessionAffinity=v1.ServiceAffinity type=v1.ServiceType
api.core.v1.Taint: effect=v1.TaintEffect
api.core.v1.Toleration: effect=v1.TaintEffect operator=v1.TolerationOperator
api.core.v1.TopologySpreadConstraint: nodeAffinityPolicy=v1.NodeInclusionPolicy
    nodeTaintsPolicy=v1.NodeInclusionPolicy whenUnsatisfiable=v1.UnsatisfiableConstraintAction
api.core.v1.VolumeMount: mountPropagation=v1.MountPropagationMode
    recursiveReadOnly=v1.RecursiveReadOnlyMode
api.core.v1.VolumeMountStatus: recursiveReadOnly=v1.RecursiveReadOnlyMode
api.core.v1.VolumeResourceRequirements: limits=v1.ResourceList requests=v1.ResourceList
api.discovery.v1.EndpointPort: protocol=v1.Protocol
api.discovery.v1.EndpointSlice: addressType=v1.AddressType
api.networking.v1.HTTPIngressPath: pathType=v1.PathType
api.networking.v1.IngressPortStatus: protocol=v1.Protocol
api.networking.v1.NetworkPolicyPort: protocol=v1.Protocol
api.networking.v1.NetworkPolicySpec: policyTypes=[]v1.PolicyType
api.policy.v1.PodDisruptionBudgetSpec: unhealthyPodEvictionPolicy=v1.UnhealthyPodEvictionPolicyType
api.scheduling.v1.PriorityClass: preemptionPolicy=v1.PreemptionPolicy
api.storage.v1.StorageClass: reclaimPolicy=v1.PersistentVolumeReclaimPolicy
    volumeBindingMode=v1.VolumeBindingMode
apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceConversion:
    strategy=v1.ConversionStrategyType
apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionCondition:
    status=v1.ConditionStatus type=v1.CustomResourceDefinitionConditionType
apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionSpec: scope=v1.ResourceScope
apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps: $schema=v1.JSONSchemaURL
    definitions=v1.JSONSchemaDefinitions dependencies=v1.JSONSchemaDependencies enum=[]v1.JSON
    x-kubernetes-validations=v1.ValidationRules
apiextensions-apiserver.pkg.apis.apiextensions.v1.ValidationRule: reason=v1.FieldValueErrorReason
apimachinery.pkg.apis.meta.v1.Condition: status=v1.ConditionStatus
apimachinery.pkg.apis.meta.v1.FieldSelectorRequirement: operator=v1.FieldSelectorOperator
apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement: operator=v1.LabelSelectorOperator
apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry: operation=v1.ManagedFieldsOperationType
apimachinery.pkg.apis.meta.v1.ObjectMeta: uid=types.UID
apimachinery.pkg.apis.meta.v1.OwnerReference: uid=types.UID
"""


def _parse_go_types(text: str) -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {}
    fields: dict[str, str] = {}
    for line in text.strip().splitlines():
        if not line.startswith(" "):
            struct, _, line = line.partition(":")
            fields = table[struct] = {}
        for pair in line.split():
            field, _, go = pair.partition("=")
            fields[field] = go
    return table


_GO_TYPES = _parse_go_types(_GO_TYPES_TEXT)

# scalar kinds
_STRING, _INT, _FLOAT, _BOOL, _BYTES, _INT_OR_STRING, _QUANTITY_KIND, _TIME_KIND = range(8)

_INT_RANGES = {
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "int": (-(1 << 63), (1 << 63) - 1),
    "uint8": (0, 255),
}

_RFC3339 = "2006-01-02T15:04:05Z07:00"
_RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"


class _Struct:
    __slots__ = ("name", "go", "fields", "zeros")
    quick = None  # the JSON value type that needs no further look, for the hot loops

    def __init__(self, name: str, go: str) -> None:
        self.name = name  # what Go's reflect.Type.Name() says, the message's `Go struct field <name>.`
        self.go = go
        self.fields: dict[str, _Node] = {}
        self.zeros: dict[str, Any] = {}  # required scalar fields -> what a null leaves in them


class _List:
    __slots__ = ("item", "go")
    quick = None

    def __init__(self, item: _Node, go: str) -> None:
        self.item = item
        self.go = go


class _Map:
    __slots__ = ("value", "go")
    quick = None

    def __init__(self, value: _Node, go: str) -> None:
        self.value = value
        self.go = go


class _Scalar:
    __slots__ = ("kind", "go", "layout", "quick")

    def __init__(self, kind: int, go: str, layout: str = "") -> None:
        self.kind = kind
        self.go = go
        self.layout = layout
        self.quick: type | None = {_STRING: str, _BOOL: bool, _INT_OR_STRING: str}.get(kind)


_Node = _Struct | _List | _Map | _Scalar | None  # None: anything goes
_UINT8 = _Scalar(_INT, "uint8")

# What a null leaves in a scalar of each kind, as Go writes it back; byte strings and times are nil
# and written as null, so they have none.
_SCALAR_ZEROS: dict[int, Any] = {_STRING: "", _INT: 0, _FLOAT: 0, _BOOL: False, _INT_OR_STRING: 0,
                                 _QUANTITY_KIND: "0"}


def _zero(node: _Node) -> Any:
    """The JSON of a Go zero value of `node`'s type; None for the nil ones (pointers, lists, maps, any)."""
    if type(node) is _Struct:
        return dict(node.zeros)  # type: ignore[union-attr]
    if type(node) is _Scalar:
        return _SCALAR_ZEROS.get(node.kind)  # type: ignore[union-attr]
    return None


class _Failure(Exception):
    """A decoder of its own (IntOrString, Quantity, Time) refused a value: Go stops there."""


# ---------------------------------------------------------------------------------------------
# Compiling the definitions


def _go_name(definition: str) -> str:
    """`io.k8s.api.core.v1.PodSpec` -> `v1.PodSpec`, as Go's reflect prints the type."""
    parts = definition.split(".")
    return f"{parts[-2]}.{parts[-1]}"


_compiled: dict[str, _Node] = {}
_roots: dict[tuple[str, str], _Node] = {}
_lock = threading.Lock()


def _compile_ref(name: str, defs: dict[str, Any]) -> _Node:
    if name in _compiled:
        return _compiled[name]
    schema = defs.get(name)
    node: _Node
    if schema is None or name in _OPAQUE:
        node = None
    elif name == _INTSTR:
        node = _Scalar(_INT_OR_STRING, "intstr.IntOrString")
    elif name == _QUANTITY:
        node = _Scalar(_QUANTITY_KIND, "resource.Quantity")
    elif name in (_TIME, _MICROTIME):
        node = _Scalar(_TIME_KIND, _go_name(name), _RFC3339 if name == _TIME else _RFC3339_MICRO)
    elif "properties" in schema or "additionalProperties" not in schema and "object" in _types(schema):
        struct = _Struct(name.rsplit(".", 1)[-1], _go_name(name))
        _compiled[name] = struct  # registered before its fields: definitions refer to themselves
        overrides = _GO_TYPES.get(name.removeprefix("io.k8s."), {})
        for prop, sub in schema.get("properties", {}).items():
            child = _compile(sub, defs)
            go = overrides.get(prop)
            struct.fields[prop] = _retyped(child, go) if go else child
        for prop in schema.get("required", ()):
            child = struct.fields.get(prop)
            if type(child) is _Scalar and _zero(child) is not None:
                struct.zeros[prop] = _zero(child)
        return struct
    else:
        node = _compile(schema, defs)
    _compiled[name] = node
    return node


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type") or []
    return [kind] if isinstance(kind, str) else kind


def _compile(schema: dict[str, Any], defs: dict[str, Any]) -> _Node:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    ref = schema.get("$ref")
    if ref:
        return _compile_ref(ref.removeprefix(_REF), defs)
    types = _types(schema)
    fmt = schema.get("format")
    if "array" in types:
        items = schema.get("items")
        item = _compile(items, defs) if isinstance(items, dict) else None
        return _List(item, "[]" + _go_of(item))
    if "object" in types or "additionalProperties" in schema:
        extra = schema.get("additionalProperties")
        if not isinstance(extra, dict):
            return None
        value = _compile(extra, defs)
        return _Map(value, "map[string]" + _go_of(value))
    if "string" in types:
        return _Scalar(_BYTES, "[]uint8") if fmt == "byte" else _Scalar(_STRING, "string")
    if "integer" in types:
        return _Scalar(_INT, fmt if fmt in ("int32", "int64") else "int")
    if "number" in types:
        return _Scalar(_FLOAT, "float64")
    if "boolean" in types:
        return _Scalar(_BOOL, "bool")
    return None


def _go_of(node: _Node) -> str:
    return "interface {}" if node is None else node.go


def _retyped(node: _Node, go: str) -> _Node:
    """The node of a field whose Go type is a named type (or holds one): same shape, Go's names."""
    if isinstance(node, _Scalar):
        return _Scalar(node.kind, go, node.layout)
    if isinstance(node, _List):
        item = _retyped(node.item, go[2:]) if go.startswith("[]") else node.item
        return _List(item, go)
    if isinstance(node, _Map):
        value = node.value
        if go.startswith("map["):
            depth, i = 0, 3
            while True:
                depth += {"[": 1, "]": -1}.get(go[i], 0)
                if depth == 0:
                    break
                i += 1
            value = _retyped(value, go[i + 1:])
        return _Map(value, go)
    return node


def _root(api_version: str, kind: str) -> _Node:
    key = (api_version, kind)
    try:
        return _roots[key]
    except KeyError:
        pass
    defs, by_kind = _definitions()
    name = by_kind.get(key)
    if name is None:
        return None
    with _lock:
        node = _roots[key] = _compile_ref(name, defs)
    return node


# ---------------------------------------------------------------------------------------------
# Checking


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "array" if isinstance(value, list) else "object"


def _mismatch(what: str, go: str, owner: str, stack: list[str]) -> str:
    """Go's UnmarshalTypeError text."""
    if not owner and not stack:
        return f"json: cannot unmarshal {what} into Go value of type {go}"
    return f"json: cannot unmarshal {what} into Go struct field {owner}.{'.'.join(stack)} of type {go}"


class _Walk:
    """One decode: the first plain mismatch, kept while the walk goes on."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: str | None = None

    def soft(self, message: str) -> None:
        if self.first is None:
            self.first = message

    def value(self, node: _Struct | _List | _Map | _Scalar, value: Any, owner: str, stack: list[str]) -> None:
        """Check a non-null value; `owner` and `stack` are where Go's decoder stands, for its message."""
        node_type = type(node)
        if node_type is _Struct:
            if type(value) is dict:
                self.struct(node, value, stack)  # type: ignore[arg-type]
                return
        elif node_type is _List:
            if type(value) is list:
                item = node.item  # type: ignore[union-attr]
                if item is not None:
                    if None in value:
                        for index, element in enumerate(value):
                            if element is None:
                                value[index] = _zero(item)
                    quick = item.quick
                    for element in value:
                        if element is not None and type(element) is not quick:
                            self.value(item, element, owner, stack)
                return
        elif node_type is _Map:
            if type(value) is dict:
                inner = node.value  # type: ignore[union-attr]
                if inner is not None:
                    if None in value.values():
                        for key, element in value.items():
                            if element is None:
                                value[key] = _zero(inner)
                    quick = inner.quick
                    for element in value.values():
                        if element is not None and type(element) is not quick:
                            self.value(inner, element, owner, stack)
                return
        else:
            self.scalar(node, value, owner, stack)  # type: ignore[arg-type]
            return
        self.soft(_mismatch(_json_type(value), node.go, owner, stack))

    def struct(self, node: _Struct, value: dict[str, Any], stack: list[str]) -> None:
        fields = node.fields
        name = node.name
        nulls: list[str] | None = None
        for key, item in value.items():
            if item is None:
                if key in fields:  # an unknown field stays for field validation to report
                    nulls = [key] if nulls is None else [*nulls, key]
                continue
            child = fields.get(key)
            if child is None or type(item) is child.quick:
                continue
            stack.append(key)
            self.value(child, item, name, stack)
            stack.pop()
        if nulls is not None:
            zeros = node.zeros
            for key in nulls:
                if key in zeros:
                    value[key] = zeros[key]
                else:
                    del value[key]

    def scalar(self, node: _Scalar, value: Any, owner: str, stack: list[str]) -> None:
        kind = node.kind
        kind_of = type(value)
        if kind == _STRING:
            if kind_of is not str:
                self.soft(_mismatch(_json_type(value), node.go, owner, stack))
        elif kind == _INT or kind == _INT_OR_STRING:
            if kind == _INT_OR_STRING and kind_of is str:
                return
            message = _int_problem(value, node.go if kind == _INT else "int32", owner, stack)
            if message is None:
                return
            if kind == _INT_OR_STRING:
                raise _Failure(message)
            self.soft(message)
        elif kind == _BOOL:
            if kind_of is not bool:
                self.soft(_mismatch(_json_type(value), node.go, owner, stack))
        elif kind == _FLOAT:
            if kind_of is not int and kind_of is not float:
                self.soft(_mismatch(_json_type(value), node.go, owner, stack))
        elif kind == _BYTES:
            if kind_of is str:
                offset = _base64_error(value)
                if offset is not None:
                    self.soft(f"illegal base64 data at input byte {offset}")
            elif kind_of is list:
                for element in value:
                    if element is not None:
                        self.scalar(_UINT8, element, owner, stack)
            else:
                self.soft(_mismatch(_json_type(value), node.go, owner, stack))
        elif kind == _QUANTITY_KIND:
            problem = _quantity_problem(value.strip() if kind_of is str else value if kind_of in (int, float) else "?")
            if problem is not None:
                raise _Failure(problem)
        elif kind_of is str:
            problem = _time_problem(node.layout, value)
            if problem is not None:
                raise _Failure(problem)
        else:
            raise _Failure(_mismatch(_json_type(value), "string", owner, stack))


def _int_problem(value: Any, go: str, owner: str, stack: list[str]) -> str | None:
    kind_of = type(value)
    if kind_of is int:
        low, high = _INT_RANGES.get(go, _INT_RANGES["int"])
        if low <= value <= high:
            return None
        return _mismatch(f"number {value}", go, owner, stack)
    if kind_of is float:
        # Go quotes the number as sent; Python's repr is how JSON encoders write it.
        return _mismatch(f"number {value!r}", go, owner, stack)
    return _mismatch(_json_type(value), go, owner, stack)


@lru_cache(maxsize=4096)
def _quantity_problem(text: str | int | float) -> str | None:
    """Go's ParseQuantity error; anything but a string or number fails its pattern like "?" does."""
    try:
        parse_quantity(text)
    except (ValueError, ArithmeticError) as exc:
        return str(exc)
    return None


def _decode(node: _Node, obj: Any) -> str | None:
    if node is None or obj is None:
        return None
    walk = _Walk()
    try:
        walk.value(node, obj, "", [])
    except _Failure as failure:
        return str(failure)
    return walk.first


def decode(api_version: str, kind: str, obj: Any) -> str | None:
    """Decode `obj` as the built-in kind, in place: its nulls read as Go reads them; returns what
    upstream's decoder says about its types, or None when it decodes.

    The bare Go error: create and update wrap it in the `cannot be handled as` 400, patches
    in a 422 on `patch`.
    """
    return _decode(_root(api_version, kind), obj)


def decode_metadata(obj: dict[str, Any]) -> None:
    """Read the nulls of a custom resource's metadata as upstream does, which decodes it into the
    built-in ObjectMeta whatever the resource's schema says."""
    metadata = obj.get("metadata")
    if type(metadata) is dict:
        defs, _ = _definitions()
        with _lock:
            node = _compile_ref(_OBJECT_META, defs)
        _decode(node, metadata)


def type_error(api_version: str, kind: str, obj: dict[str, Any]) -> StatusError | None:
    """Decode `obj` in place (see `decode`); the 400 upstream answers when its fields have the wrong
    JSON type, or None.

    Custom resources and kinds without upstream definitions are never refused here.
    """
    message = decode(api_version, kind, obj)
    if message is None:
        return None
    version = api_version.rsplit("/", 1)[-1]
    return errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {message}')


# ---------------------------------------------------------------------------------------------
# Go's base64 (StdEncoding.Decode) and time.Parse, for their error messages


_BASE64_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_NEWLINES = (0x0A, 0x0D)


def _base64_error(text: str) -> int | None:
    """The byte offset Go's padded standard decoder reports as corrupt, or None; it skips CR and LF."""
    src = text.encode("utf-8", "surrogatepass")
    end = len(src)
    si = 0
    while si < end:
        quantum = 0
        while quantum < 4:
            if si == end:
                return si - quantum if quantum else None
            byte = src[si]
            si += 1
            if byte in _BASE64_ALPHABET:
                quantum += 1
                continue
            if byte in _NEWLINES:
                continue
            if byte != 0x3D or quantum < 2:  # '=' only pads the third or fourth place
                return si - 1
            if quantum == 2:
                while si < end and src[si] in _NEWLINES:
                    si += 1
                if si == end:
                    return end
                if src[si] != 0x3D:
                    return si - 1
                si += 1
            while si < end and src[si] in _NEWLINES:
                si += 1
            return si if si < end else None
    return None


def _go_time_quote(raw: bytes) -> str:
    """The time package's own quoting: non-ASCII and control bytes as \\x escapes."""
    out = ['"']
    for byte in raw:
        if byte >= 0x80 or byte < 0x20:
            out.append(f"\\x{byte:02x}")
        elif byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        else:
            out.append(chr(byte))
    out.append('"')
    return "".join(out)


def _digit(raw: bytes, i: int) -> bool:
    return len(raw) > i and 0x30 <= raw[i] <= 0x39


def _getnum(raw: bytes, fixed: bool) -> tuple[int, bytes] | None:
    if not _digit(raw, 0):
        return None
    if not _digit(raw, 1):
        return None if fixed else (raw[0] - 0x30, raw[1:])
    return (raw[0] - 0x30) * 10 + raw[1] - 0x30, raw[2:]


def _atoi(raw: bytes) -> int | None:
    negative = raw[:1] == b"-"
    if raw[:1] in (b"-", b"+"):
        raw = raw[1:]
    if not raw.isdigit() and raw:
        return None
    number = int(raw) if raw else 0
    if number > 1 << 63:
        return None
    return -number if negative else number


def _nanos(raw: bytes, width: int) -> tuple[bool, bool]:
    """Go's parseNanoseconds on raw[:width]: (parsed, in range)."""
    if raw[:1] not in (b".", b","):
        return False, True
    number = _atoi(raw[1:min(width, 10)])
    if number is None:
        return False, True
    return True, number >= 0


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


# layout chunks: (literal prefix, element, element as written in the layout)
_CHUNKS = {
    _RFC3339: (("", "year", "2006"), ("-", "month", "01"), ("-", "day", "02"), ("T", "hour", "15"),
               (":", "minute", "04"), (":", "second", "05"), ("", "zone", "Z07:00"), ("", "", "")),
    _RFC3339_MICRO: (("", "year", "2006"), ("-", "month", "01"), ("-", "day", "02"), ("T", "hour", "15"),
                     (":", "minute", "04"), (":", "second", "05"), ("", "fraction", ".000000"),
                     ("", "zone", "Z07:00"), ("", "", "")),
}


_WELL_FORMED = {
    _RFC3339: re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,][0-9]+)?"
                         r"(?:Z|[+-]([0-9]{2}):([0-9]{2}))"),
    _RFC3339_MICRO: re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})[.,][0-9]{6}"
                               r"(?:Z|[+-]([0-9]{2}):([0-9]{2}))"),
}


def _time_problem(layout: str, text: str) -> str | None:
    """Go's time.Parse(layout, text) error message, or None when it parses."""
    match = _WELL_FORMED[layout].fullmatch(text)
    if match is not None:
        year, month, day, hour, minute, second = map(int, match.groups()[:6])
        zone_hour, zone_minute = match.group(7), match.group(8)
        if 1 <= month <= 12 and 1 <= day <= _days_in(month, year) and hour < 24 and minute < 60 \
                and second < 60 and (zone_hour is None or int(zone_hour) <= 24 and int(zone_minute) <= 60):
            return None
    return _parsing_problem(layout, text)


def _parsing_problem(layout: str, text: str) -> str | None:
    """Go's general time parser, element by element, for its error message."""
    whole = text.encode("utf-8", "surrogatepass")
    value = whole
    year, month, day = 0, 1, 1
    quoted = _go_time_quote(whole)

    def cannot(elem: bytes, layout_elem: str) -> str:
        return f'parsing time {quoted} as "{layout}": cannot parse {_go_time_quote(elem)} as "{layout_elem}"'

    chunks = _CHUNKS[layout]
    for index, (prefix, element, written) in enumerate(chunks):
        if prefix:
            if not value.startswith(prefix.encode()):
                return cannot(value, prefix)
            value = value[len(prefix):]
        if not element:
            if value:
                return f"parsing time {quoted}: extra text: {_go_time_quote(value)}"
            break
        hold = value
        bad = False
        out_of_range = ""
        if element == "year":
            if len(value) < 4 or not _digit(value, 0):
                bad = True
            else:
                parsed_year = _atoi(value[:4])
                value = value[4:]
                bad = parsed_year is None
                year = parsed_year or 0
        elif element in ("month", "day", "minute"):
            got = _getnum(value, True)
            if got is None:
                bad = True
            else:
                number, value = got
                if element == "month":
                    month = number
                    out_of_range = "month" if not 1 <= number <= 12 else ""
                elif element == "day":
                    day = number
                elif number >= 60:
                    out_of_range = "minute"
        elif element == "hour":
            got = _getnum(value, False)
            if got is None:
                bad = True
            else:
                number, value = got
                out_of_range = "hour" if number >= 24 else ""
        elif element == "second":
            got = _getnum(value, True)
            if got is None:
                bad = True
            else:
                number, value = got
                if number >= 60:
                    out_of_range = "second"
                elif len(value) >= 2 and value[:1] in (b".", b",") and _digit(value, 1) \
                        and chunks[index + 1][1] != "fraction":
                    width = 2
                    while _digit(value, width):
                        width += 1
                    value = value[width:]
        elif element == "fraction":
            width = len(written)
            if len(value) < width:
                bad = True
            else:
                parsed, in_range = _nanos(value, width)
                bad = not parsed
                out_of_range = "" if in_range else "fractional second"
                value = value[width:]
        elif value[:1] == b"Z":
            value = value[1:]
        elif len(value) < 6 or value[3:4] != b":":
            bad = True
        else:
            sign, hours, minutes, value = value[:1], value[1:3], value[4:6], value[6:]
            hour_got = _getnum(hours, True)
            minute_got = _getnum(minutes, True) if hour_got else None
            if hour_got and hour_got[0] > 24:
                out_of_range = "time zone offset hour"
            if minute_got and minute_got[0] > 60:
                out_of_range = "time zone offset minute"
            bad = hour_got is None or minute_got is None or sign not in (b"+", b"-")
        if out_of_range:
            return f"parsing time {quoted}: {out_of_range} out of range"
        if bad:
            return cannot(hold, written)
    if day < 1 or day > _days_in(month, year):
        return f"parsing time {quoted}: day out of range"
    return None

"""Server-side `meta.k8s.io/v1` Table rendering: what `kubectl get` prints.

Columns and cells follow upstream's printers (pkg/printers/internalversion) as the
apiserver runs them, i.e. always "wide": every column is sent and kubectl hides the
priority-1 ones unless asked for `-o wide`. Objects are the stored dicts; where
upstream's printer relies on a value its defaulting always sets, the same default
is assumed here so that a sparse object prints as upstream would print it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

import orjson

from services.api import definitions
from services.api.catalog import Resource
from services.api.storage import is_default_class, object_class
from services.runtime import durations

Row = list[Any]
RowFn = Callable[[dict[str, Any], float], Row]
# (name, type, priority, description, format); a description is literal text or an
# OpenAPI (definition, property) pair resolved lazily.
Column = tuple[str, str, int, "str | tuple[str, str]", str]

_NONE = "<none>"
_UNSET = "<unset>"
_UNKNOWN = "<unknown>"

# ---------------------------------------------------------------------------
# Time formatting (k8s.io/apimachinery/pkg/util/duration.HumanDuration)
# ---------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """A duration with 2-3 significant figures, exactly as upstream's HumanDuration."""
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 120:
        return f"{secs}s"
    minutes = secs // 60
    if minutes < 10:
        s = secs % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = secs // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    days = hours // 24
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        dy = days % 365
        return f"{days // 365}y" if dy == 0 else f"{days // 365}y{dy}d"
    return f"{days // 365}y"


@lru_cache(maxsize=8192)
def _epoch(ts: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 (micro)time, None when unparseable."""
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None


def _since(ts: Any, now: float) -> str:
    """upstream's translateTimestampSince: `<unknown>` for a missing time."""
    if not ts:
        return _UNKNOWN
    t = _epoch(ts)
    if t is None:
        return _UNKNOWN
    return human_duration(now - t)


def _age(obj: dict[str, Any], now: float) -> str:
    return _since(obj["metadata"].get("creationTimestamp"), now)


# ---------------------------------------------------------------------------
# Shared formatting helpers
# ---------------------------------------------------------------------------


def format_labels(labels: dict[str, str] | None) -> str:
    """labels.FormatLabels: sorted `k=v` pairs, `<none>` when empty."""
    if not labels:
        return _NONE
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


_SELECTOR_OPS = {"In": " in ", "NotIn": " notin "}


def selector_string(sel: dict[str, Any] | None) -> str | None:
    """metav1.LabelSelectorAsSelector(...).String(); None when the selector is invalid."""
    if not sel:
        return ""
    reqs: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or ():
        key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
        if op in _SELECTOR_OPS:
            if not values:
                return None
            reqs.append((key, f"{key}{_SELECTOR_OPS[op]}({','.join(sorted(values))})"))
        elif op == "Exists":
            reqs.append((key, key))
        elif op == "DoesNotExist":
            reqs.append((key, "!" + key))
        else:
            return None
    reqs.sort(key=lambda r: r[0])
    return ",".join(r[1] for r in reqs)


def format_label_selector(sel: dict[str, Any] | None) -> str:
    """metav1.FormatLabelSelector: `<none>` when empty, `<error>` when invalid."""
    s = selector_string(sel)
    if s is None:
        return "<error>"
    return s or _NONE


def _containers(pod_spec: dict[str, Any] | None) -> tuple[str, str]:
    cs = (pod_spec or {}).get("containers") or ()
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _qty(v: Any) -> str:
    """A quantity as printed; stored quantities are already canonical strings."""
    if v is None:
        return "0"
    return v if isinstance(v, str) else str(v)


def _join_host_port(host: str, port: Any) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _with_more(items: list[str], count: int, limit: int, empty: str) -> str:
    ret = ",".join(items[:limit])
    if count > limit:
        return f"{ret} + {count - limit} more..."
    return ret or empty


# ---------------------------------------------------------------------------
# Row builders, one per printer upstream registers
# ---------------------------------------------------------------------------

_POD_SUCCEEDED = [{"type": "Completed", "status": "True", "reason": "Succeeded",
                   "message": "The pod has completed successfully."}]
_POD_FAILED = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]


def _term_time(cs: dict[str, Any]) -> float:
    term = (cs.get("lastState") or {}).get("terminated")
    if term is None:
        return 0.0
    finished = term.get("finishedAt")
    return (_epoch(finished) or 0.0) if finished else 0.0


def _pod_status_reason(pod: dict[str, Any]) -> tuple[str, int, int, int, float]:
    """upstream printPod's STATUS derivation: (reason, ready, total, restarts, last restart)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = status.get("conditions") or ()
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    total = len(spec.get("containers") or ())
    ready = restarts = sidecar_restarts = 0
    last = sidecar_last = 0.0
    init_specs = spec.get("initContainers") or ()
    sidecars = {c.get("name") for c in init_specs if c.get("restartPolicy") == "Always"}
    total += sum(1 for c in init_specs if c.get("restartPolicy") == "Always")

    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or ()):
        count = cs.get("restartCount") or 0
        restarts += count
        t = _term_time(cs)
        last = max(last, t)
        is_sidecar = cs.get("name") in sidecars
        if is_sidecar:
            sidecar_restarts += count
            sidecar_last = max(sidecar_last, t)
        state = cs.get("state") or {}
        term = state.get("terminated")
        waiting = state.get("waiting")
        if term is not None and (term.get("exitCode") or 0) == 0:
            continue
        if is_sidecar and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term is not None:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode') or 0}"
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _has_condition(conditions, "Initialized"):
        restarts, last = sidecar_restarts, sidecar_last
        has_running = False
        for cs in reversed(status.get("containerStatuses") or ()):
            restarts += cs.get("restartCount") or 0
            last = max(last, _term_time(cs))
            state = cs.get("state") or {}
            waiting = state.get("waiting")
            term = state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                signal = term.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{term.get('exitCode') or 0}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            reason = "Running" if pod_ready else "NotReady"

    if pod["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return reason, ready, total, restarts, last


def pod_cells(pod: dict[str, Any], now: float) -> Row:
    reason, ready, total, restarts, last = _pod_status_reason(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    restarts_str = str(restarts)
    if restarts and last:
        restarts_str = f"{restarts} ({human_duration(now - last)} ago)"
    pod_ip = status.get("podIP") or ""
    if not pod_ip and status.get("podIPs"):
        pod_ip = status["podIPs"][0].get("ip") or ""
    gates_str = _NONE
    gates = spec.get("readinessGates")
    if gates:
        conds = status.get("conditions") or ()
        true_count = 0
        for g in gates:
            for c in conds:
                if c.get("type") == g.get("conditionType"):
                    true_count += c.get("status") == "True"
                    break
        gates_str = f"{true_count}/{len(gates)}"
    return [
        pod["metadata"].get("name", ""), f"{ready}/{total}", reason, restarts_str, _age(pod, now),
        pod_ip or _NONE, spec.get("nodeName") or _NONE, status.get("nominatedNodeName") or _NONE, gates_str,
    ]


def _pod_conditions(pod: dict[str, Any]) -> list[dict[str, str]] | None:
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return _POD_SUCCEEDED
    if phase == "Failed":
        return _POD_FAILED
    return None


def _pod_template_cells(obj: dict[str, Any], now: float) -> Row:
    tmpl = obj.get("template") or {}
    names, images = _containers(tmpl.get("spec"))
    labels = (tmpl.get("metadata") or {}).get("labels")
    return [obj["metadata"].get("name", ""), names, images, format_labels(labels)]


def _int_or_str(v: Any) -> str:
    return "N/A" if v is None else str(v)


def _pdb_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    return [obj["metadata"].get("name", ""), _int_or_str(spec.get("minAvailable")),
            _int_or_str(spec.get("maxUnavailable")), (obj.get("status") or {}).get("disruptionsAllowed") or 0,
            _age(obj, now)]


def _replicas(spec: dict[str, Any]) -> int:
    r = spec.get("replicas")
    return 1 if r is None else r


def _rc_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(_template_spec(obj))
    return [obj["metadata"].get("name", ""), _replicas(spec), status.get("replicas") or 0,
            status.get("readyReplicas") or 0, _age(obj, now), names, images,
            format_labels(spec.get("selector"))]


def _rs_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(_template_spec(obj))
    return [obj["metadata"].get("name", ""), _replicas(spec), status.get("replicas") or 0,
            status.get("readyReplicas") or 0, _age(obj, now), names, images,
            format_label_selector(spec.get("selector"))]


def _deployment_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(_template_spec(obj))
    selector = selector_string(spec.get("selector"))
    return [obj["metadata"].get("name", ""), f"{status.get('readyReplicas') or 0}/{_replicas(spec)}",
            status.get("updatedReplicas") or 0, status.get("availableReplicas") or 0, _age(obj, now),
            names, images, "<invalid>" if selector is None else selector]


def _sts_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(_template_spec(obj))
    return [obj["metadata"].get("name", ""), f"{status.get('readyReplicas') or 0}/{_replicas(spec)}",
            _age(obj, now), names, images]


def _ds_cells(obj: dict[str, Any], now: float) -> Row:
    status = obj.get("status") or {}
    tspec = _template_spec(obj)
    names, images = _containers(tspec)
    return [obj["metadata"].get("name", ""), status.get("desiredNumberScheduled") or 0,
            status.get("currentNumberScheduled") or 0, status.get("numberReady") or 0,
            status.get("updatedNumberScheduled") or 0, status.get("numberAvailable") or 0,
            format_labels(tspec.get("nodeSelector")), _age(obj, now), names, images,
            format_label_selector((obj.get("spec") or {}).get("selector"))]


def _has_condition(conditions: Iterable[dict[str, Any]], ctype: str) -> bool:
    for c in conditions:
        if c.get("type") == ctype:
            return c.get("status") == "True"
    return False


def _job_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start = _epoch(status["startTime"]) if status.get("startTime") else None
    end = _epoch(status["completionTime"]) if status.get("completionTime") else None
    if start is None:
        duration = ""
    else:
        duration = human_duration((now if end is None else end) - start)
    conds = status.get("conditions") or ()
    if _has_condition(conds, "Complete"):
        state = "Complete"
    elif _has_condition(conds, "Failed"):
        state = "Failed"
    elif obj["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif _has_condition(conds, "Suspended"):
        state = "Suspended"
    elif _has_condition(conds, "FailureTarget"):
        state = "FailureTarget"
    elif _has_condition(conds, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    names, images = _containers(_template_spec(obj))
    return [obj["metadata"].get("name", ""), state, completions, duration, _age(obj, now), names, images,
            format_label_selector(spec.get("selector"))]


def _bool_ptr(v: Any) -> str:
    if v is None:
        return _UNSET
    return "True" if v else "False"


def _cronjob_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    last = status.get("lastScheduleTime")
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    names, images = _containers((job_spec.get("template") or {}).get("spec"))
    suspend = spec.get("suspend", False)
    return [obj["metadata"].get("name", ""), spec.get("schedule", ""), spec.get("timeZone") or _NONE,
            _bool_ptr(suspend), len(status.get("active") or ()), _since(last, now) if last else _NONE,
            _age(obj, now), names, images, format_label_selector(job_spec.get("selector"))]


def _lb_ingress(lb: dict[str, Any] | None) -> str:
    found = {i.get("ip") or i.get("hostname") for i in (lb or {}).get("ingress") or ()}
    found.discard(None)
    found.discard("")
    return ",".join(sorted(found))


def _service_external_ip(spec: dict[str, Any], status: dict[str, Any], svc_type: str) -> str:
    external = spec.get("externalIPs") or []
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) if external else _NONE
    if svc_type == "LoadBalancer":
        lb = _lb_ingress(status.get("loadBalancer"))
        if external:
            return ",".join(([lb] if lb else []) + external)
        return lb or "<pending>"
    if svc_type == "ExternalName":
        return spec.get("externalName", "")
    return _UNKNOWN


def _service_ports(ports: Iterable[dict[str, Any]]) -> str:
    pieces = []
    for p in ports:
        proto = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            pieces.append(f"{p.get('port', 0)}:{p['nodePort']}/{proto}")
        else:
            pieces.append(f"{p.get('port', 0)}/{proto}")
    return ",".join(pieces) or _NONE


def _service_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    svc_type = spec.get("type") or "ClusterIP"
    cluster_ip = spec.get("clusterIP") or ((spec.get("clusterIPs") or [None])[0]) or _NONE
    return [obj["metadata"].get("name", ""), svc_type, cluster_ip,
            _service_external_ip(spec, status, svc_type), _service_ports(spec.get("ports") or ()),
            _age(obj, now), format_labels(spec.get("selector"))]


def _ingress_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    rules = spec.get("rules") or []
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(rule["host"])
    host_str = "*" if not hosts else ",".join(hosts) + (f" + {len(rules) - 3} more..." if more else "")
    return [obj["metadata"].get("name", ""), spec.get("ingressClassName") or _NONE, host_str,
            _lb_ingress((obj.get("status") or {}).get("loadBalancer")),
            "80, 443" if spec.get("tls") else "80", _age(obj, now)]


def _ingress_class_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    params = spec.get("parameters")
    text = _NONE
    if params is not None:
        text = params.get("kind", "")
        if params.get("apiGroup") is not None:
            text += "." + params["apiGroup"]
        text += "/" + params.get("name", "")
    return [obj["metadata"].get("name", ""), spec.get("controller", ""), text, _age(obj, now)]


def _endpoints_cells(obj: dict[str, Any], now: float) -> Row:
    subsets = obj.get("subsets") or []
    if not subsets:
        text = _NONE
    else:
        items: list[str] = []
        count = 0
        for ss in subsets:
            addrs = ss.get("addresses") or ()
            ports = ss.get("ports") or ()
            if not ports:
                count += len(addrs)
                items.extend(a.get("ip", "") for a in addrs[: max(0, 3 - len(items))])
                continue
            for p in ports:
                count += len(addrs)
                items.extend(_join_host_port(a.get("ip", ""), p.get("port", 0))
                             for a in addrs[: max(0, 3 - len(items))])
        text = _with_more(items, count, 3, "")
    return [obj["metadata"].get("name", ""), text, _age(obj, now)]


def _endpoint_slice_cells(obj: dict[str, Any], now: float) -> Row:
    ports = []
    for p in obj.get("ports") or ():
        ports.append(str(p["port"]) if p.get("port") is not None else (p.get("name") or "*"))
    addrs = [a for e in obj.get("endpoints") or () for a in e.get("addresses") or ()]
    return [obj["metadata"].get("name", ""), obj.get("addressType", ""),
            _with_more(ports, len(ports), 3, _UNSET), _with_more(addrs, len(addrs), 3, _UNSET),
            _age(obj, now)]


def _node_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    state = "Unknown"
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            state = "Ready" if c.get("status") == "True" else "NotReady"
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    roles = set()
    for k, v in (obj["metadata"].get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            if len(k) > 24:
                roles.add(k[24:])
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    info = status.get("nodeInfo") or {}
    internal = external = _NONE
    for a in reversed(status.get("addresses") or ()):
        if a.get("type") == "InternalIP":
            internal = a.get("address", "")
        elif a.get("type") == "ExternalIP":
            external = a.get("address", "")
    return [obj["metadata"].get("name", ""), state, ",".join(sorted(roles)) or _NONE, _age(obj, now),
            info.get("kubeletVersion", ""), internal, external, info.get("osImage") or _UNKNOWN,
            info.get("kernelVersion") or _UNKNOWN, info.get("containerRuntimeVersion") or _UNKNOWN]


def _event_source(src: dict[str, Any] | None, controller: str, instance: str) -> str:
    component = (src or {}).get("component") or controller or ""
    host = (src or {}).get("host") or instance or ""
    return f"{component}, {host}" if host else component


def _event_cells_fields(obj: dict[str, Any], now: float, regarding: str, note: str, source: str,
                        first: str, last: str, count: str) -> Row:
    first_seen = _since(obj.get(first), now) if obj.get(first) else _since(obj.get("eventTime"), now)
    last_seen = _since(obj.get(last), now) if obj.get(last) else first_seen
    n = obj.get(count) or 0
    series = obj.get("series")
    if series is not None:
        last_seen = _since(series.get("lastObservedTime"), now)
        n = series.get("count") or 0
    elif n == 0:
        n = 1
    inv = obj.get(regarding) or {}
    kind = (inv.get("kind") or "").lower()
    target = f"{kind}/{inv['name']}" if inv.get("name") else kind
    src = _event_source(obj.get(source), obj.get("reportingController", ""), obj.get("reportingInstance", ""))
    return [last_seen, obj.get("type", ""), obj.get("reason", ""), target, inv.get("fieldPath", ""), src,
            (obj.get(note) or "").strip(), first_seen, n, obj["metadata"].get("name", "")]


def _event_cells(obj: dict[str, Any], now: float) -> Row:
    return _event_cells_fields(obj, now, "involvedObject", "message", "source", "firstTimestamp",
                               "lastTimestamp", "count")


def _events_v1_cells(obj: dict[str, Any], now: float) -> Row:
    return _event_cells_fields(obj, now, "regarding", "note", "deprecatedSource", "deprecatedFirstTimestamp",
                               "deprecatedLastTimestamp", "deprecatedCount")


def _namespace_cells(obj: dict[str, Any], now: float) -> Row:
    phase = (obj.get("status") or {}).get("phase") or "Active"
    return [obj["metadata"].get("name", ""), phase, _age(obj, now)]


def _secret_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), obj.get("type") or "Opaque", len(obj.get("data") or ()),
            _age(obj, now)]


def _service_account_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), len(obj.get("secrets") or ()), _age(obj, now)]


def _configmap_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), len(obj.get("data") or ()) + len(obj.get("binaryData") or ()),
            _age(obj, now)]


_ACCESS_MODES = (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"),
                 ("ReadWriteOncePod", "RWOP"))


def _access_modes(modes: Iterable[str] | None) -> str:
    present = set(modes or ())
    return ",".join(short for mode, short in _ACCESS_MODES if mode in present)


def _pv_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    claim = spec.get("claimRef")
    phase = "Terminating" if obj["metadata"].get("deletionTimestamp") else (status.get("phase") or "Pending")
    return [obj["metadata"].get("name", ""), _qty((spec.get("capacity") or {}).get("storage")),
            _access_modes(spec.get("accessModes")), spec.get("persistentVolumeReclaimPolicy") or "Retain",
            phase,
            f"{claim.get('namespace', '')}/{claim.get('name', '')}" if claim is not None else "",
            object_class(obj), spec.get("volumeAttributesClassName") or _UNSET, status.get("reason", ""),
            _age(obj, now), spec.get("volumeMode") or "Filesystem"]


def _pvc_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    phase = "Terminating" if obj["metadata"].get("deletionTimestamp") else (status.get("phase") or "Pending")
    capacity = modes = ""
    if spec.get("volumeName"):
        modes = _access_modes(status.get("accessModes"))
        capacity = _qty((status.get("capacity") or {}).get("storage"))
    return [obj["metadata"].get("name", ""), phase, spec.get("volumeName", ""), capacity, modes,
            object_class(obj), spec.get("volumeAttributesClassName") or _UNSET, _age(obj, now),
            spec.get("volumeMode") or "Filesystem"]


def _binding_cells(obj: dict[str, Any], now: float) -> Row:
    ref = obj.get("roleRef") or {}
    users: list[str] = []
    groups: list[str] = []
    sas: list[str] = []
    for s in obj.get("subjects") or ():
        kind = s.get("kind")
        if kind == "ServiceAccount":
            sas.append(f"{s.get('namespace', '')}/{s.get('name', '')}")
        elif kind == "User":
            users.append(s.get("name", ""))
        elif kind == "Group":
            groups.append(s.get("name", ""))
    return [obj["metadata"].get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(obj, now),
            ", ".join(users), ", ".join(groups), ", ".join(sas)]


def _hpa_metric(spec: dict[str, Any], status: dict[str, Any] | None) -> str:
    mtype = spec.get("type")
    src = {"External": "external", "Pods": "pods", "Object": "object", "Resource": "resource",
           "ContainerResource": "containerResource"}.get(mtype or "")
    if src is None:
        return "<unknown type>"
    s = spec.get(src) or {}
    target = s.get("target") or {}
    st = (status or {}).get(src)
    cur = (st or {}).get("current") or {}
    if mtype == "Pods":
        current = _qty_or_nil(cur.get("averageValue")) if st is not None else _UNKNOWN
        return f"{current}/{_qty_or_nil(target.get('averageValue'))}"
    if mtype in ("External", "Object"):
        if target.get("averageValue") is not None:
            current = _qty(cur["averageValue"]) if cur.get("averageValue") is not None else _UNKNOWN
            return f"{current}/{_qty(target['averageValue'])} (avg)"
        current = _qty_or_nil(cur.get("value")) if st is not None else _UNKNOWN
        return f"{current}/{_qty_or_nil(target.get('value'))}"
    name = s.get("name", "")
    if target.get("averageValue") is not None:
        current = _qty_or_nil(cur.get("averageValue")) if st is not None else _UNKNOWN
        return f"{name}: {current}/{_qty(target['averageValue'])}"
    current = f"{cur['averageUtilization']}%" if cur.get("averageUtilization") is not None else _UNKNOWN
    util = target.get("averageUtilization")
    return f"{name}: {current}/{'<auto>' if util is None else f'{util}%'}"


def _qty_or_nil(v: Any) -> str:
    return "<nil>" if v is None else _qty(v)


def _hpa_cells(obj: dict[str, Any], now: float) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if "metrics" in spec or "currentMetrics" in status:
        metrics, statuses = spec.get("metrics") or [], status.get("currentMetrics") or []
    else:
        # autoscaling/v1 keeps one CPU target; storage defaults it to 80% like autoscaling/v2 does.
        target = spec.get("targetCPUUtilizationPercentage")
        metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 80 if target is None else target}}}]
        cur = status.get("currentCPUUtilizationPercentage")
        statuses = [] if cur is None else [{"type": "Resource", "resource": {
            "name": "cpu", "current": {"averageUtilization": cur}}}]
    if not metrics:
        text = _NONE
    else:
        parts = [_hpa_metric(m, statuses[i] if i < len(statuses) else None) for i, m in enumerate(metrics)]
        text = ", ".join(parts[:2]) + (f" + {len(parts) - 2} more..." if len(parts) > 2 else "")
    ref = spec.get("scaleTargetRef") or {}
    min_pods = spec.get("minReplicas")
    return [obj["metadata"].get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}", text,
            _UNSET if min_pods is None else str(min_pods), spec.get("maxReplicas") or 0,
            status.get("currentReplicas") or 0, _age(obj, now)]


def _netpol_cells(obj: dict[str, Any], now: float) -> Row:
    selector = format_label_selector((obj.get("spec") or {}).get("podSelector"))
    return [obj["metadata"].get("name", ""), selector, _age(obj, now)]


def _storage_class_cells(obj: dict[str, Any], now: float) -> Row:
    name = obj["metadata"].get("name", "")
    if is_default_class(obj):
        name += " (default)"
    return [name, obj.get("provisioner", ""), obj.get("reclaimPolicy") or "Delete",
            obj.get("volumeBindingMode") or "Immediate", bool(obj.get("allowVolumeExpansion")),
            _age(obj, now)]


def _csi_driver_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    requests = spec.get("tokenRequests")
    tokens = _UNSET if requests is None else ",".join(r.get("audience") or "" for r in requests)
    modes = ",".join(spec.get("volumeLifecycleModes") or ()) or _NONE
    return [obj["metadata"].get("name", ""), spec.get("attachRequired", True), bool(spec.get("podInfoOnMount")),
            bool(spec.get("storageCapacity")), tokens, bool(spec.get("requiresRepublish")), modes, _age(obj, now)]


def _csi_storage_capacity_cells(obj: dict[str, Any], now: float) -> Row:
    capacity = obj.get("capacity")
    return [obj["metadata"].get("name", ""), obj.get("storageClassName") or "",
            _UNSET if capacity is None else _qty(capacity)]


def _lease_cells(obj: dict[str, Any], now: float) -> Row:
    holder = (obj.get("spec") or {}).get("holderIdentity") or ""
    return [obj["metadata"].get("name", ""), holder, _age(obj, now)]


def _component_status_cells(obj: dict[str, Any], now: float) -> Row:
    status, message, error = "Unknown", "", ""
    for cond in obj.get("conditions") or []:
        if cond.get("type") == "Healthy":
            status = "Healthy" if cond.get("status") == "True" else "Unhealthy"
            message, error = cond.get("message") or "", cond.get("error") or ""
            break
    return [obj["metadata"].get("name", ""), status, message, error]


def _webhook_configuration_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), len(obj.get("webhooks") or ()), _age(obj, now)]


def _admission_policy_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    kind = spec.get("paramKind")
    shown = f"{kind.get('apiVersion') or ''}/{kind.get('kind') or ''}" if isinstance(kind, dict) else _UNSET
    return [obj["metadata"].get("name", ""), len(spec.get("validations") or ()), shown, _age(obj, now)]


def _admission_policy_binding_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    ref = spec.get("paramRef")
    shown = _UNSET
    if isinstance(ref, dict):
        if ref.get("name"):
            shown = f"{ref.get('namespace') or '*'}/{ref['name']}"
        elif ref.get("selector") is not None:
            shown = selector_string(ref["selector"]) or ""
    return [obj["metadata"].get("name", ""), spec.get("policyName") or "", shown, _age(obj, now)]


def _runtime_class_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), obj.get("handler") or "", _age(obj, now)]


def _api_service_cells(obj: dict[str, Any], now: float) -> Row:
    """SERVICE is `namespace/name` or Local; AVAILABLE the Available condition, with its reason when not True."""
    spec = obj.get("spec") or {}
    service = spec.get("service")
    where = f"{service.get('namespace') or ''}/{service.get('name') or ''}" if isinstance(service, dict) else "Local"
    available = "Unknown"
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Available":
            available = str(cond.get("status") or "Unknown")
            if available != "True" and cond.get("reason"):
                available = f"{available} ({cond['reason']})"
    return [obj["metadata"].get("name", ""), where, available, _age(obj, now)]


def _flow_schema_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    method = (spec.get("distinguisherMethod") or {}).get("type") or _NONE
    dangling = next((c.get("status") or "" for c in (obj.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Dangling"), "?")
    return [obj["metadata"].get("name", ""), (spec.get("priorityLevelConfiguration") or {}).get("name") or "",
            spec.get("matchingPrecedence") or 0, method, _age(obj, now), dangling]


def _priority_level_cells(obj: dict[str, Any], now: float) -> Row:
    spec = obj.get("spec") or {}
    shares = queues = hand = limit = _NONE
    limited = spec.get("limited")
    if spec.get("type") == "Limited" and limited is not None:
        shares = limited.get("nominalConcurrencyShares", 0)
        queuing = (limited.get("limitResponse") or {}).get("queuing")
        if queuing is not None:
            queues, hand, limit = (queuing.get(k, 0) for k in ("queues", "handSize", "queueLengthLimit"))
    return [obj["metadata"].get("name", ""), spec.get("type") or "", shares, queues, hand, limit, _age(obj, now)]


def _controller_revision_cells(obj: dict[str, Any], now: float) -> Row:
    controller = _NONE
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            group = ref.get("apiVersion", "").rpartition("/")[0]
            kind = ref.get("kind", "")
            gk = f"{kind}.{group}" if group else kind
            controller = f"{gk.lower()}/{ref.get('name', '')}" if gk else ref.get("name", "")
            break
    return [obj["metadata"].get("name", ""), controller, obj.get("revision") or 0, _age(obj, now)]


def _quota_cells(obj: dict[str, Any], now: float) -> Row:
    status = obj.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        text = f"{name}: {_qty(used.get(name))}/{_qty(hard[name])}"
        pieces = name.split(".")
        (limits if len(pieces) > 1 and pieces[0] == "limits" else requests).append(text)
    return [obj["metadata"].get("name", ""), _age(obj, now), ", ".join(requests), ", ".join(limits)]


def _priority_class_cells(obj: dict[str, Any], now: float) -> Row:
    return [obj["metadata"].get("name", ""), obj.get("value") or 0, bool(obj.get("globalDefault")),
            _age(obj, now), obj.get("preemptionPolicy") or "PreemptLowerPriority"]


def _csr_cells(obj: dict[str, Any], now: float) -> Row:
    """Upstream's printCertificateSigningRequest: Denied over Approved over Pending, then Failed and Issued."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    types = {c.get("type") for c in status.get("conditions") or () if isinstance(c, dict)}
    state = "Denied" if "Denied" in types else "Approved" if "Approved" in types else "Pending"
    if "Failed" in types:
        state += ",Failed"
    if status.get("certificate"):
        state += ",Issued"
    seconds = spec.get("expirationSeconds")
    duration = durations.short_human_duration(seconds) if isinstance(seconds, int) else _NONE
    return [obj["metadata"].get("name", ""), _age(obj, now), spec.get("signerName") or _NONE,
            spec.get("username") or "", duration, state]


def _default_cells(obj: dict[str, Any], now: float) -> Row:
    ts = obj["metadata"].get("creationTimestamp")
    t = _epoch(ts) if ts else None
    created = "0001-01-01T00:00:00Z" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    return [obj["metadata"].get("name", ""), created]


# ---------------------------------------------------------------------------
# Column definitions
# ---------------------------------------------------------------------------

_META = "meta.v1.ObjectMeta"
NAME: Column = ("Name", "string", 0, (_META, "name"), "name")
AGE: Column = ("Age", "string", 0, (_META, "creationTimestamp"), "")
_CONTAINERS_DOC = "Names of each container in the template."
_IMAGES_DOC = "Images referenced by each container in the template."
_WEBHOOKS_DOC = "Webhooks indicates the number of webhooks registered in this configuration"


def _c(name: str, ctype: str, desc: str | tuple[str, str], priority: int = 0) -> Column:
    return (name, ctype, priority, desc, "")


def _wide_template(selector: tuple[str, str] | None) -> list[Column]:
    cols = [_c("Containers", "string", _CONTAINERS_DOC, 1), _c("Images", "string", _IMAGES_DOC, 1)]
    if selector is not None:
        cols.append(_c("Selector", "string", selector, 1))
    return cols


_PRINTERS: dict[tuple[str, str], tuple[list[Column], RowFn]] = {
    ("", "pods"): ([
        NAME,
        _c("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        _c("Status", "string", "The aggregate status of the containers in this pod."),
        _c("Restarts", "string",
           "The number of times the containers in this pod have been restarted and when the last container "
           "in this pod has restarted."),
        AGE,
        _c("IP", "string", ("core.v1.PodStatus", "podIP"), 1),
        _c("Node", "string", ("core.v1.PodSpec", "nodeName"), 1),
        _c("Nominated Node", "string", ("core.v1.PodStatus", "nominatedNodeName"), 1),
        _c("Readiness Gates", "string", ("core.v1.PodSpec", "readinessGates"), 1),
    ], pod_cells),
    ("", "podtemplates"): ([
        NAME, _c("Containers", "string", _CONTAINERS_DOC), _c("Images", "string", _IMAGES_DOC),
        _c("Pod Labels", "string", "The labels for the pod template."),
    ], _pod_template_cells),
    ("policy", "poddisruptionbudgets"): ([
        NAME,
        _c("Min Available", "string", "The minimum number of pods that must be available."),
        _c("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
        _c("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
        AGE,
    ], _pdb_cells),
    ("", "replicationcontrollers"): ([
        NAME,
        _c("Desired", "integer", ("core.v1.ReplicationControllerSpec", "replicas")),
        _c("Current", "integer", ("core.v1.ReplicationControllerStatus", "replicas")),
        _c("Ready", "integer", ("core.v1.ReplicationControllerStatus", "readyReplicas")),
        AGE, *_wide_template(("core.v1.ReplicationControllerSpec", "selector")),
    ], _rc_cells),
    ("apps", "replicasets"): ([
        NAME,
        _c("Desired", "integer", ("apps.v1.ReplicaSetSpec", "replicas")),
        _c("Current", "integer", ("apps.v1.ReplicaSetStatus", "replicas")),
        _c("Ready", "integer", ("apps.v1.ReplicaSetStatus", "readyReplicas")),
        AGE, *_wide_template(("apps.v1.ReplicaSetSpec", "selector")),
    ], _rs_cells),
    ("apps", "daemonsets"): ([
        NAME,
        _c("Desired", "integer", ("apps.v1.DaemonSetStatus", "desiredNumberScheduled")),
        _c("Current", "integer", ("apps.v1.DaemonSetStatus", "currentNumberScheduled")),
        _c("Ready", "integer", ("apps.v1.DaemonSetStatus", "numberReady")),
        _c("Up-to-date", "integer", ("apps.v1.DaemonSetStatus", "updatedNumberScheduled")),
        _c("Available", "integer", ("apps.v1.DaemonSetStatus", "numberAvailable")),
        _c("Node Selector", "string", ("core.v1.PodSpec", "nodeSelector")),
        AGE, *_wide_template(("apps.v1.DaemonSetSpec", "selector")),
    ], _ds_cells),
    ("batch", "jobs"): ([
        NAME,
        _c("Status", "string", "Status of the job."),
        _c("Completions", "string", ("batch.v1.JobStatus", "succeeded")),
        _c("Duration", "string", "Time required to complete the job."),
        AGE, *_wide_template(("batch.v1.JobSpec", "selector")),
    ], _job_cells),
    ("batch", "cronjobs"): ([
        NAME,
        _c("Schedule", "string", ("batch.v1.CronJobSpec", "schedule")),
        _c("Timezone", "string", ("batch.v1.CronJobSpec", "timeZone")),
        _c("Suspend", "boolean", ("batch.v1.CronJobSpec", "suspend")),
        _c("Active", "integer", ("batch.v1.CronJobStatus", "active")),
        _c("Last Schedule", "string", ("batch.v1.CronJobStatus", "lastScheduleTime")),
        AGE, *_wide_template(("batch.v1.JobSpec", "selector")),
    ], _cronjob_cells),
    ("", "services"): ([
        NAME,
        _c("Type", "string", ("core.v1.ServiceSpec", "type")),
        _c("Cluster-IP", "string", ("core.v1.ServiceSpec", "clusterIP")),
        _c("External-IP", "string", ("core.v1.ServiceSpec", "externalIPs")),
        _c("Port(s)", "string", ("core.v1.ServiceSpec", "ports")),
        AGE,
        _c("Selector", "string", ("core.v1.ServiceSpec", "selector"), 1),
    ], _service_cells),
    ("networking.k8s.io", "ingresses"): ([
        NAME,
        _c("Class", "string", "The name of the IngressClass resource that should be used for additional "
                              "configuration"),
        _c("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
        _c("Address", "string", "Address is a list containing ingress points for the load-balancer"),
        _c("Ports", "string", "Ports of TLS configurations that open"),
        AGE,
    ], _ingress_cells),
    ("networking.k8s.io", "ingressclasses"): ([
        NAME,
        _c("Controller", "string", "Controller that is responsible for handling this class"),
        _c("Parameters", "string", "A reference to a resource with additional parameters"),
        AGE,
    ], _ingress_class_cells),
    ("apps", "statefulsets"): ([
        NAME, _c("Ready", "string", "Number of the pod with ready state"), AGE, *_wide_template(None),
    ], _sts_cells),
    ("", "endpoints"): ([
        NAME, _c("Endpoints", "string", ("core.v1.Endpoints", "subsets")), AGE,
    ], _endpoints_cells),
    ("", "nodes"): ([
        NAME,
        _c("Status", "string", "The status of the node"),
        _c("Roles", "string", "The roles of the node"),
        AGE,
        _c("Version", "string", ("core.v1.NodeSystemInfo", "kubeletVersion")),
        _c("Internal-IP", "string", ("core.v1.NodeStatus", "addresses"), 1),
        _c("External-IP", "string", ("core.v1.NodeStatus", "addresses"), 1),
        _c("OS-Image", "string", ("core.v1.NodeSystemInfo", "osImage"), 1),
        _c("Kernel-Version", "string", ("core.v1.NodeSystemInfo", "kernelVersion"), 1),
        _c("Container-Runtime", "string", ("core.v1.NodeSystemInfo", "containerRuntimeVersion"), 1),
    ], _node_cells),
    ("", "namespaces"): ([
        NAME, _c("Status", "string", "The status of the namespace"), AGE,
    ], _namespace_cells),
    ("", "secrets"): ([
        NAME, _c("Type", "string", ("core.v1.Secret", "type")),
        _c("Data", "string", ("core.v1.Secret", "data")), AGE,
    ], _secret_cells),
    ("", "serviceaccounts"): ([
        NAME, _c("Secrets", "string", ("core.v1.ServiceAccount", "secrets")), AGE,
    ], _service_account_cells),
    ("", "persistentvolumes"): ([
        NAME,
        _c("Capacity", "string", ("core.v1.PersistentVolumeSpec", "capacity")),
        _c("Access Modes", "string", ("core.v1.PersistentVolumeSpec", "accessModes")),
        _c("Reclaim Policy", "string", ("core.v1.PersistentVolumeSpec", "persistentVolumeReclaimPolicy")),
        _c("Status", "string", ("core.v1.PersistentVolumeStatus", "phase")),
        _c("Claim", "string", ("core.v1.PersistentVolumeSpec", "claimRef")),
        _c("StorageClass", "string", "StorageClass of the pv"),
        _c("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
        _c("Reason", "string", ("core.v1.PersistentVolumeStatus", "reason")),
        AGE,
        _c("VolumeMode", "string", ("core.v1.PersistentVolumeSpec", "volumeMode"), 1),
    ], _pv_cells),
    ("", "persistentvolumeclaims"): ([
        NAME,
        _c("Status", "string", ("core.v1.PersistentVolumeClaimStatus", "phase")),
        _c("Volume", "string", ("core.v1.PersistentVolumeClaimSpec", "volumeName")),
        _c("Capacity", "string", ("core.v1.PersistentVolumeClaimStatus", "capacity")),
        _c("Access Modes", "string", ("core.v1.PersistentVolumeClaimStatus", "accessModes")),
        _c("StorageClass", "string", "StorageClass of the pvc"),
        _c("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
        AGE,
        _c("VolumeMode", "string", ("core.v1.PersistentVolumeClaimSpec", "volumeMode"), 1),
    ], _pvc_cells),
    ("apps", "deployments"): ([
        NAME,
        _c("Ready", "string", "Number of the pod with ready state"),
        _c("Up-to-date", "string", ("apps.v1.DeploymentStatus", "updatedReplicas")),
        _c("Available", "string", ("apps.v1.DeploymentStatus", "availableReplicas")),
        AGE, *_wide_template(("apps.v1.DeploymentSpec", "selector")),
    ], _deployment_cells),
    ("autoscaling", "horizontalpodautoscalers"): ([
        NAME,
        _c("Reference", "string", ("autoscaling.v2.HorizontalPodAutoscalerSpec", "scaleTargetRef")),
        _c("Targets", "string", ("autoscaling.v2.HorizontalPodAutoscalerSpec", "metrics")),
        _c("MinPods", "string", ("autoscaling.v2.HorizontalPodAutoscalerSpec", "minReplicas")),
        _c("MaxPods", "string", ("autoscaling.v2.HorizontalPodAutoscalerSpec", "maxReplicas")),
        _c("Replicas", "string", ("autoscaling.v2.HorizontalPodAutoscalerStatus", "currentReplicas")),
        AGE,
    ], _hpa_cells),
    ("", "configmaps"): ([
        NAME, _c("Data", "string", ("core.v1.ConfigMap", "data")), AGE,
    ], _configmap_cells),
    ("networking.k8s.io", "networkpolicies"): ([
        NAME, _c("Pod-Selector", "string", ("networking.v1.NetworkPolicySpec", "podSelector")), AGE,
    ], _netpol_cells),
    ("rbac.authorization.k8s.io", "rolebindings"): ([
        NAME, _c("Role", "string", ("rbac.v1.RoleBinding", "roleRef")), AGE,
        _c("Users", "string", "Users in the roleBinding", 1),
        _c("Groups", "string", "Groups in the roleBinding", 1),
        _c("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", 1),
    ], _binding_cells),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): ([
        NAME, _c("Role", "string", ("rbac.v1.ClusterRoleBinding", "roleRef")), AGE,
        _c("Users", "string", "Users in the clusterRoleBinding", 1),
        _c("Groups", "string", "Groups in the clusterRoleBinding", 1),
        _c("ServiceAccounts", "string", "ServiceAccounts in the clusterRoleBinding", 1),
    ], _binding_cells),
    ("coordination.k8s.io", "leases"): ([
        NAME, _c("Holder", "string", ("coordination.v1.LeaseSpec", "holderIdentity")), AGE,
    ], _lease_cells),
    ("storage.k8s.io", "storageclasses"): ([
        NAME,
        _c("Provisioner", "string", ("storage.v1.StorageClass", "provisioner")),
        _c("ReclaimPolicy", "string", ("storage.v1.StorageClass", "reclaimPolicy")),
        _c("VolumeBindingMode", "string", ("storage.v1.StorageClass", "volumeBindingMode")),
        _c("AllowVolumeExpansion", "string", ("storage.v1.StorageClass", "allowVolumeExpansion")),
        AGE,
    ], _storage_class_cells),
    ("storage.k8s.io", "csidrivers"): ([
        NAME,
        _c("AttachRequired", "boolean", ("storage.v1.CSIDriverSpec", "attachRequired")),
        _c("PodInfoOnMount", "boolean", ("storage.v1.CSIDriverSpec", "podInfoOnMount")),
        _c("StorageCapacity", "boolean", ("storage.v1.CSIDriverSpec", "storageCapacity")),
        _c("TokenRequests", "string", ("storage.v1.CSIDriverSpec", "tokenRequests")),
        _c("RequiresRepublish", "boolean", ("storage.v1.CSIDriverSpec", "requiresRepublish")),
        _c("Modes", "string", ("storage.v1.CSIDriverSpec", "volumeLifecycleModes")),
        AGE,
    ], _csi_driver_cells),
    ("storage.k8s.io", "csistoragecapacities"): ([
        NAME,
        _c("StorageClassName", "string", ("storage.v1.CSIStorageCapacity", "storageClassName")),
        _c("Capacity", "string", ("storage.v1.CSIStorageCapacity", "capacity")),
    ], _csi_storage_capacity_cells),
    ("apps", "controllerrevisions"): ([
        NAME, _c("Controller", "string", "Controller of the object"),
        _c("Revision", "string", ("apps.v1.ControllerRevision", "revision")), AGE,
    ], _controller_revision_cells),
    ("", "resourcequotas"): ([
        NAME,
        AGE,
        _c("Request", "string",
           "Request represents a minimum amount of cpu/memory that a container may consume."),
        _c("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use "
                              "independent of contention on the node."),
    ], _quota_cells),
    ("scheduling.k8s.io", "priorityclasses"): ([
        NAME,
        _c("Value", "integer", ("scheduling.v1.PriorityClass", "value")),
        _c("Global-Default", "boolean", ("scheduling.v1.PriorityClass", "globalDefault")),
        AGE,
        _c("PreemptionPolicy", "string", ("scheduling.v1.PriorityClass", "preemptionPolicy")),
    ], _priority_class_cells),
    ("", "componentstatuses"): ([
        NAME,
        _c("Status", "string", "Status of the component conditions"),
        _c("Message", "string", "Message of the component conditions"),
        _c("Error", "string", "Error of the component conditions"),
    ], _component_status_cells),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ([
        NAME, _c("Webhooks", "integer", _WEBHOOKS_DOC), AGE,
    ], _webhook_configuration_cells),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ([
        NAME, _c("Webhooks", "integer", _WEBHOOKS_DOC), AGE,
    ], _webhook_configuration_cells),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): ([
        NAME,
        _c("Validations", "integer", "Validations indicates the number of validation rules defined in this "
                                     "configuration"),
        _c("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy"),
        AGE,
    ], _admission_policy_cells),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): ([
        NAME,
        _c("PolicyName", "string", "PolicyName indicates the policy definition which the policy binding binded to"),
        _c("ParamRef", "string", "ParamRef indicates the param resource which sets the configration param"),
        AGE,
    ], _admission_policy_binding_cells),
    ("node.k8s.io", "runtimeclasses"): ([
        NAME, _c("Handler", "string", ("node.v1.RuntimeClass", "handler")), AGE,
    ], _runtime_class_cells),
    ("apiregistration.k8s.io", "apiservices"): ([
        NAME,
        _c("Service", "string", "The reference to the service that hosts this API endpoint."),
        _c("Available", "string", "Whether this service is available."),
        AGE,
    ], _api_service_cells),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): ([
        NAME,
        _c("PriorityLevel", "string", ("flowcontrol.v1.PriorityLevelConfigurationReference", "name")),
        _c("MatchingPrecedence", "string", ("flowcontrol.v1.FlowSchemaSpec", "matchingPrecedence")),
        _c("DistinguisherMethod", "string", ("flowcontrol.v1.FlowSchemaSpec", "distinguisherMethod")),
        AGE,
        _c("MissingPL", "string", "references a broken or non-existent PriorityLevelConfiguration"),
    ], _flow_schema_cells),
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): ([
        NAME,
        _c("Type", "string", ("flowcontrol.v1.PriorityLevelConfigurationSpec", "type")),
        _c("NominalConcurrencyShares", "string",
           ("flowcontrol.v1.LimitedPriorityLevelConfiguration", "nominalConcurrencyShares")),
        _c("Queues", "string", ("flowcontrol.v1.QueuingConfiguration", "queues")),
        _c("HandSize", "string", ("flowcontrol.v1.QueuingConfiguration", "handSize")),
        _c("QueueLengthLimit", "string", ("flowcontrol.v1.QueuingConfiguration", "queueLengthLimit")),
        AGE,
    ], _priority_level_cells),
    ("certificates.k8s.io", "certificatesigningrequests"): ([
        NAME, AGE,
        _c("SignerName", "string", ("certificates.v1.CertificateSigningRequestSpec", "signerName")),
        _c("Requestor", "string", "Name of the user who requested the CSR"),
        _c("RequestedDuration", "string", ("certificates.v1.CertificateSigningRequestSpec", "expirationSeconds")),
        _c("Condition", "string", ("certificates.v1.CertificateSigningRequestStatus", "conditions")),
    ], _csr_cells),
    ("discovery.k8s.io", "endpointslices"): ([
        NAME,
        _c("AddressType", "string", ("discovery.v1.EndpointSlice", "addressType")),
        _c("Ports", "string", ("discovery.v1.EndpointSlice", "ports")),
        _c("Endpoints", "string", ("discovery.v1.EndpointSlice", "endpoints")),
        AGE,
    ], _endpoint_slice_cells),
}

_EVENT_COLUMNS: list[Column] = [
    _c("Last Seen", "string", ("core.v1.Event", "lastTimestamp")),
    _c("Type", "string", ("core.v1.Event", "type")),
    _c("Reason", "string", ("core.v1.Event", "reason")),
    _c("Object", "string", ("core.v1.Event", "involvedObject")),
    _c("Subobject", "string", ("core.v1.ObjectReference", "fieldPath"), 1),
    _c("Source", "string", ("core.v1.Event", "source"), 1),
    _c("Message", "string", ("core.v1.Event", "message")),
    _c("First Seen", "string", ("core.v1.Event", "firstTimestamp"), 1),
    _c("Count", "string", ("core.v1.Event", "count"), 1),
    ("Name", "string", 1, (_META, "name"), "name"),
]
_PRINTERS[("", "events")] = (_EVENT_COLUMNS, _event_cells)
_PRINTERS[("events.k8s.io", "events")] = (_EVENT_COLUMNS, _events_v1_cells)

_DEFAULT: tuple[list[Column], RowFn] = (
    [NAME, ("Created At", "date", 0, (_META, "creationTimestamp"), "")], _default_cells)


def _openapi_definitions() -> dict[str, Any]:
    """Upstream's OpenAPI definitions, whose field docs are the printers' descriptions."""
    return definitions.definitions()


def _describe(desc: str | tuple[str, str]) -> str:
    if isinstance(desc, str):
        return desc
    definition, prop = desc
    prefix = "io.k8s.apimachinery.pkg.apis." if definition.startswith("meta.") else "io.k8s.api."
    schema = _openapi_definitions().get(prefix + definition) or {}
    return ((schema.get("properties") or {}).get(prop) or {}).get("description", "")


@cache
def _column_dicts(columns: tuple[Column, ...]) -> tuple[dict[str, Any], ...]:
    return tuple({"name": n, "type": t, "format": f, "description": _describe(d), "priority": p}
                 for n, t, p, d, f in columns)


Columns = list[dict[str, Any]]


def _printer(res: Resource, printer_columns: Columns | None) -> tuple[Columns, RowFn]:
    """Columns and row builder: upstream's printer, a CRD's columns, or the generic Name/Created At."""
    if printer_columns is not None or res.custom:
        return _crd_columns(printer_columns or [{
            "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
            "description": _describe((_META, "creationTimestamp"))}])
    columns, row_fn = _PRINTERS.get((res.group, res.plural), _DEFAULT)
    return [dict(c) for c in _column_dicts(tuple(columns))], row_fn


def column_definitions(res: Resource, printer_columns: Columns | None = None) -> Columns:
    """The Table columns for `res`.

    `printer_columns` are a CRD version's additionalPrinterColumns; a custom resource
    without them gets upstream's default `Age` column.
    """
    return _printer(res, printer_columns)[0]


# ---------------------------------------------------------------------------
# Custom resources with additionalPrinterColumns (a simple-JSONPath subset, as CRDs allow)
# ---------------------------------------------------------------------------

_PATH_TOKEN = re.compile(
    r"""\.([A-Za-z0-9_\-]+)"""  # .field
    r"""|\[(\d+|\*)\]"""  # [0] or [*]
    r"""|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*['"]([^'"]*)['"]\)\]"""  # [?(@.type=="Ready")]
    r"""|\.?\[['"]([^'"]+)['"]\]"""  # ['dotted.key']
)


def _compile_path(path: str) -> list[tuple[str, Any]] | None:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None:
            return None
        key, index, fkey, fval, quoted = m.groups()
        if key is not None or quoted is not None:
            steps.append(("key", key if key is not None else quoted))
        elif index is not None:
            steps.append(("all", None) if index == "*" else ("index", int(index)))
        else:
            steps.append(("filter", (fkey.split("."), fval)))
        pos = m.end()
    return steps


def _eval_path(steps: list[tuple[str, Any]], obj: Any) -> Any:
    """The first value the path selects, or None."""
    values = [obj]
    for op, arg in steps:
        nxt: list[Any] = []
        for v in values:
            if op == "key" and isinstance(v, dict) and arg in v:
                nxt.append(v[arg])
            elif op == "index" and isinstance(v, list) and -len(v) <= arg < len(v):
                nxt.append(v[arg])
            elif op == "all" and isinstance(v, list):
                nxt.extend(v)
            elif op == "filter" and isinstance(v, list):
                keys, want = arg
                for item in v:
                    cur = item
                    for k in keys:
                        cur = cur.get(k) if isinstance(cur, dict) else None
                    if cur is not None and str(cur) == want:
                        nxt.append(item)
        values = nxt
        if not values:
            return None
    return values[0]


def _jsonpath_text(value: Any) -> str:
    """How upstream's jsonpath prints a value: scalars as text, objects and lists as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def _crd_cell(ctype: str, value: Any, now: float) -> Any:
    if value is None:
        return None
    if ctype == "string":
        return _jsonpath_text(value)
    if ctype == "integer":
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if ctype == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if ctype == "boolean":
        return value if isinstance(value, bool) else None
    if ctype == "date":
        if not isinstance(value, str):
            return None
        t = _epoch(value)
        return "<invalid>" if t is None else human_duration(now - t)
    return None


def _crd_columns(printer_columns: Columns) -> tuple[Columns, RowFn]:
    defs = [dict(_column_dicts((NAME,))[0])]
    paths: list[tuple[str, list[tuple[str, Any]] | None]] = []
    for col in printer_columns:
        jsonpath = col.get("jsonPath", "")
        desc = col.get("description") or f"Custom resource definition column (in JSONPath format): {jsonpath}"
        ctype = col.get("type", "")
        defs.append({"name": col.get("name", ""), "type": ctype, "format": col.get("format", ""),
                     "description": desc, "priority": col.get("priority", 0)})
        paths.append((ctype, _compile_path(jsonpath)))

    def cells(obj: dict[str, Any], now: float) -> Row:
        row: Row = [obj["metadata"].get("name", "")]
        for ctype, steps in paths:
            row.append(None if steps is None else _crd_cell(ctype, _eval_path(steps, obj), now))
        return row

    return defs, cells


# ---------------------------------------------------------------------------
# Tables and partial metadata
# ---------------------------------------------------------------------------


def partial_object_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """`as=PartialObjectMetadata`: an object reduced to its metadata."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata") or {}}


def partial_object_metadata_list(
    objs: Iterable[dict[str, Any]], list_meta: dict[str, Any] | None
) -> dict[str, Any]:
    """`as=PartialObjectMetadataList`: a list reduced to its items' metadata."""
    return {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {},
            "items": [partial_object_metadata(o) for o in objs]}


def to_table(
    res: Resource,
    objects: list[dict[str, Any]],
    *,
    list_meta: dict[str, Any] | None = None,
    include_object: str = "Metadata",
    with_columns: bool = True,
    now: datetime | None = None,
    printer_columns: Columns | None = None,
) -> dict[str, Any]:
    """Render objects as a `meta.k8s.io/v1` Table.

    `include_object` is the request's includeObject (None, Metadata, Object); upstream
    sends `object: null` for None. `with_columns=False` omits the column definitions,
    as upstream does for every watch event after the first.
    """
    column_defs, row_fn = _printer(res, printer_columns)
    now_ts = now.timestamp() if now is not None else time.time()
    is_pod = res.group == "" and res.plural == "pods"
    rows = []
    for obj in objects:
        if include_object == "Object":
            embedded: dict[str, Any] | None = obj
        elif include_object == "None":
            embedded = None
        else:
            embedded = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata", {})}
        row: dict[str, Any] = {"cells": row_fn(obj, now_ts), "object": embedded}
        if is_pod:
            conditions = _pod_conditions(obj)
            if conditions is not None:
                row["conditions"] = conditions
        rows.append(row)
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}}
    if with_columns:
        table["columnDefinitions"] = column_defs
    table["rows"] = rows
    return table

"""Container environment as upstream builds it: service links, envFrom, env with valueFrom, and
`$(VAR)` expansion in env values, command and args."""

from __future__ import annotations

import base64
import math
import re
from decimal import Decimal
from typing import Any

from kubelet_agent.pods.resolver import Resolver
from kubelet_agent.pods.util import quantity

_REF = re.compile(r"\$\$|\$\(([^)]*)\)")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class EnvError(Exception):
    """The environment cannot be built; the container waits with CreateContainerConfigError."""


def expand(text: str, env: dict[str, str]) -> str:
    """`$(VAR)` -> its value when defined (kept verbatim otherwise); `$$` -> `$`."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return _REF.sub(sub, text)


def service_env(services: list[dict[str, Any]]) -> dict[str, str]:
    """`<SVC>_SERVICE_HOST`/`_PORT` and the docker-link style variables for each service with an IP."""
    out: dict[str, str] = {}
    for svc in sorted(services, key=lambda s: s["metadata"]["name"]):
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        ports = spec.get("ports") or []
        out[f"{name}_SERVICE_HOST"] = ip
        if not ports:
            continue
        out[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                out[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        first = ports[0]
        proto = (first.get("protocol") or "TCP").lower()
        out[f"{name}_PORT"] = f"{proto}://{ip}:{first['port']}"
        for p in ports:
            proto = (p.get("protocol") or "TCP").lower()
            prefix = f"{name}_PORT_{p['port']}_{proto.upper()}"
            out[prefix] = f"{proto}://{ip}:{p['port']}"
            out[f"{prefix}_PROTO"] = proto
            out[f"{prefix}_PORT"] = str(p["port"])
            out[f"{prefix}_ADDR"] = ip
    return out


def field_value(pod: dict[str, Any], path: str, pod_ip: str, host_ips: list[str]) -> str:
    """A downward API fieldRef value."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ips[0] if host_ips else "",
        "status.hostIPs": ",".join(host_ips),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return simple[path]
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise EnvError(f"unsupported fieldRef {path!r}")


def resource_value(pod: dict[str, Any], ref: dict[str, Any], default_container: str,
                   allocatable: dict[str, str]) -> str:
    """A resourceFieldRef value in units of its divisor, rounded up like upstream."""
    name = ref.get("containerName") or default_container
    containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
    containers.update({c["name"]: c for c in (pod.get("spec") or {}).get("initContainers") or []})
    container = containers.get(name)
    if container is None:
        raise EnvError(f"container {name!r} not found for resourceFieldRef")
    kind, _, res = (ref.get("resource") or "").partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(res)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(res)
    if raw is None:
        raw = allocatable.get(res, "0") if kind == "limits" else "0"
    value = quantity(raw)
    divisor = quantity(ref.get("divisor") or "1") or Decimal(1)
    return str(math.ceil(value / divisor))


async def build_env(
    pod: dict[str, Any],
    container: dict[str, Any],
    resolver: Resolver | None,
    *,
    pod_ip: str,
    host_ips: list[str],
    allocatable: dict[str, str],
) -> dict[str, str]:
    """The container's environment in upstream's precedence: services, then envFrom, then env."""
    spec = pod.get("spec") or {}
    ns = (pod.get("metadata") or {}).get("namespace", "default")
    env: dict[str, str] = {}
    if resolver is not None:
        services = await resolver.services(ns) if spec.get("enableServiceLinks", True) else []
        masters = [s for s in await resolver.services("default") if s["metadata"]["name"] == "kubernetes"]
        if ns != "default" or not spec.get("enableServiceLinks", True):
            services = [s for s in services if not (ns == "default" and s["metadata"]["name"] == "kubernetes")]
            services.extend(masters)
        env.update(service_env(services))
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        ref = source.get("configMapRef") or source.get("secretRef")
        if not ref or resolver is None:
            continue
        is_secret = "secretRef" in source
        obj = await (resolver.secret(ns, ref["name"]) if is_secret else resolver.configmap(ns, ref["name"]))
        if obj is None:
            if ref.get("optional"):
                continue
            raise EnvError(f'{"secret" if is_secret else "configmap"} "{ref["name"]}" not found')
        data = obj.get("data") or {}
        for key, value in data.items():
            if _ENV_NAME.match(prefix + key):
                env[prefix + key] = base64.b64decode(value).decode(errors="replace") if is_secret else value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value") or "", env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ips)
        elif "resourceFieldRef" in source:
            env[name] = resource_value(pod, source["resourceFieldRef"], container["name"], allocatable)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            is_secret = "secretKeyRef" in source
            ref = source["secretKeyRef" if is_secret else "configMapKeyRef"]
            if resolver is None:
                continue
            obj = await (resolver.secret(ns, ref["name"]) if is_secret else resolver.configmap(ns, ref["name"]))
            kind = "secret" if is_secret else "configmap"
            if obj is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'{kind} "{ref["name"]}" not found')
            data = obj.get("data") or {}
            if ref["key"] not in data:
                if not is_secret and ref["key"] in (obj.get("binaryData") or {}):
                    data = obj["binaryData"]
                elif ref.get("optional"):
                    continue
                else:
                    what = "Secret" if is_secret else "ConfigMap"
                    raise EnvError(f"couldn't find key {ref['key']} in {what} {ns}/{ref['name']}")
            value = data[ref["key"]]
            env[name] = base64.b64decode(value).decode(errors="replace") if is_secret else value
    return env

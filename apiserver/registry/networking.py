"""networking.k8s.io (Ingress, IngressClass, NetworkPolicy) and discovery.k8s.io EndpointSlice."""

from __future__ import annotations

from apiserver.registry.base import GenerationStrategy, MetaStrategy, child, get, setdefault
from apiserver.registry.core_misc import validate_endpoint_port
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")
POLICY_TYPES = ("Egress", "Ingress")
ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")


def _validate_backend(backend: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    service = backend.get("service")
    resource = backend.get("resource")
    if service and resource:
        causes.append(v.invalid(path, backend, "cannot set both resource and service backends"))
    elif service:
        name = service.get("name") or ""
        if not name:
            causes.append(v.required(f"{path}.service.name"))
        else:
            causes.extend(v.invalid(f"{path}.service.name", name, m) for m in v.is_dns1035_label(name))
        port = service.get("port") or {}
        if port.get("name") and port.get("number"):
            causes.append(v.invalid(f"{path}.service.port", port, "cannot set both port name & port number"))
        elif port.get("number") is not None:
            causes.extend(v.invalid(f"{path}.service.port.number", port["number"], m)
                          for m in v.is_valid_port_num(port["number"]))
        elif port.get("name"):
            causes.extend(v.invalid(f"{path}.service.port.name", port["name"], m)
                          for m in v.is_valid_port_name(port["name"]))
        else:
            causes.append(v.required(f"{path}.service.port", "port name or number is required"))
    elif not resource:
        causes.append(v.invalid(path, backend, "resource or service backend is required"))
    return causes


class IngressStrategy(GenerationStrategy):
    initial_status = {"loadBalancer": {}}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        if not spec.get("defaultBackend") and not spec.get("rules"):
            causes.append(v.invalid("spec", spec, "either `defaultBackend` or `rules` must be specified"))
        if spec.get("defaultBackend"):
            causes.extend(_validate_backend(spec["defaultBackend"], "spec.defaultBackend"))
        for i, rule in enumerate(spec.get("rules") or []):
            path = f"spec.rules[{i}]"
            host = rule.get("host") or ""
            if host:
                check = host[2:] if host.startswith("*.") else host
                causes.extend(v.invalid(f"{path}.host", host, m) for m in v.is_dns1123_subdomain(check))
            http = rule.get("http")
            if http is None:
                continue
            paths = http.get("paths") or []
            if not paths:
                causes.append(v.required(f"{path}.http.paths"))
            for j, item in enumerate(paths):
                ppath = f"{path}.http.paths[{j}]"
                kind = item.get("pathType") or ""
                if not kind:
                    causes.append(v.required(f"{ppath}.pathType", "pathType must be specified"))
                elif kind not in PATH_TYPES:
                    causes.append(v.not_supported(f"{ppath}.pathType", kind, PATH_TYPES))
                url = item.get("path") or ""
                if kind in ("Exact", "Prefix") and not url.startswith("/"):
                    causes.append(v.invalid(f"{ppath}.path", url, "must be an absolute path"))
                causes.extend(_validate_backend(item.get("backend") or {}, f"{ppath}.backend"))
        for i, tls in enumerate(spec.get("tls") or []):
            for j, host in enumerate(tls.get("hosts") or []):
                check = host[2:] if host.startswith("*.") else host
                causes.extend(v.invalid(f"spec.tls[{i}].hosts[{j}]", host, m) for m in v.is_dns1123_subdomain(check))
        return causes


class IngressClassStrategy(GenerationStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        controller = get(obj, "spec", "controller", default="")
        if not controller:
            return [v.required("spec.controller")]
        return [v.invalid("spec.controller", controller, m) for m in v.is_qualified_name(controller)]

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return self.validate_spec(new) + v.validate_immutable(
            get(new, "spec", "controller"), get(old, "spec", "controller"), "spec.controller"
        )


class NetworkPolicyStrategy(GenerationStrategy):
    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        setdefault(spec, "podSelector", {})
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
        for direction in ("ingress", "egress"):
            for rule in spec.get(direction) or []:
                for port in rule.get("ports") or []:
                    setdefault(port, "protocol", "TCP")

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes = v.validate_label_selector(spec.get("podSelector"), "spec.podSelector")
        types = spec.get("policyTypes") or []
        for i, kind in enumerate(types):
            if kind not in POLICY_TYPES:
                causes.append(v.not_supported(f"spec.policyTypes[{i}]", kind, POLICY_TYPES))
        if len(types) > 2:
            causes.append(v.invalid("spec.policyTypes", types, "may not specify more than two policyTypes"))
        for direction, peers_key in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(spec.get(direction) or []):
                for j, peer in enumerate(rule.get(peers_key) or []):
                    ppath = f"spec.{direction}[{i}].{peers_key}[{j}]"
                    set_keys = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
                    if not set_keys:
                        causes.append(v.required(ppath, "must specify a peer"))
                    elif "ipBlock" in set_keys and len(set_keys) > 1:
                        causes.append(v.forbidden(ppath, "may not specify both ipBlock and another peer"))
                    for key in ("podSelector", "namespaceSelector"):
                        causes.extend(v.validate_label_selector(peer.get(key), f"{ppath}.{key}"))
        return causes


class EndpointSliceStrategy(MetaStrategy):
    uses_generation = True

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        kind = obj.get("addressType") or ""
        if not kind:
            causes.append(v.required("addressType"))
        elif kind not in ADDRESS_TYPES:
            causes.append(v.not_supported("addressType", kind, ADDRESS_TYPES))
        for i, endpoint in enumerate(obj.get("endpoints") or []):
            addresses = endpoint.get("addresses") or []
            if not addresses:
                causes.append(v.required(f"endpoints[{i}].addresses", "must contain at least 1 address"))
            elif len(addresses) > 100:
                causes.append(v.invalid(f"endpoints[{i}].addresses", len(addresses),
                                        "must not contain more than 100 addresses"))
        ports = obj.get("ports") or []
        for i, port in enumerate(ports):
            causes.extend(validate_endpoint_port(port, f"ports[{i}]", False))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        return self.validate_spec(new) + v.validate_immutable(new.get("addressType"), old.get("addressType"),
                                                              "addressType")

"""Service status: the load-balancer ingress defaults and rules of upstream's SetDefaults_Service and
ValidateLoadBalancerStatus (with LoadBalancerIPMode on and AllowServiceLBStatusOnNonLB off, as in v1.32)."""

from __future__ import annotations

import ipaddress

from apiserver.registry.base import get
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

IP_MODES = ("Proxy", "VIP")


def default_load_balancer_status(svc: Obj) -> None:
    """A LoadBalancer service's ingress points with an IP and no ipMode get ipMode VIP."""
    if get(svc, "spec", "type") != "LoadBalancer":
        return
    for ingress in get(svc, "status", "loadBalancer", "ingress", default=None) or ():
        if isinstance(ingress, dict) and ingress.get("ip") and ingress.get("ipMode") is None:
            ingress["ipMode"] = "VIP"


def validate_load_balancer_status(svc: Obj) -> list[Cause]:
    """Causes for `status.loadBalancer`: ingress only on LoadBalancer services, valid IPs and
    hostnames, ipMode set exactly when ip is and one of upstream's modes."""
    path = "status.loadBalancer.ingress"
    ingresses = get(svc, "status", "loadBalancer", "ingress", default=None) or []
    if not isinstance(ingresses, list):
        return []
    if ingresses and get(svc, "spec", "type") != "LoadBalancer":
        return [v.forbidden(path, "may only be used when `spec.type` is 'LoadBalancer'")]
    causes: list[Cause] = []
    for i, ingress in enumerate(ingresses):
        if not isinstance(ingress, dict):
            continue
        at = f"{path}[{i}]"
        ip = ingress.get("ip") or ""
        mode = ingress.get("ipMode")
        if ip and not _is_ip(ip):
            causes.append(v.invalid(f"{at}.ip", ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
        if mode is None:
            if ip:
                causes.append(v.required(f"{at}.ipMode", "must be specified when `ip` is set"))
        elif not ip:
            causes.append(v.forbidden(f"{at}.ipMode", "may not be specified when `ip` is not"))
        elif mode not in IP_MODES:
            causes.append(v.not_supported(f"{at}.ipMode", mode, IP_MODES))
        hostname = ingress.get("hostname") or ""
        if hostname:
            causes.extend(v.invalid(f"{at}.hostname", hostname, m) for m in v.is_dns1123_subdomain(hostname))
            if _is_ip(hostname):
                causes.append(v.invalid(f"{at}.hostname", hostname, "must be a DNS name, not an IP address"))
    return causes


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True

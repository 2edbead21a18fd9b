"""The address a server tells others to reach it at, chosen the way upstream's components choose it.

A server bound to a wildcard or loopback address cannot advertise that address to other machines, so
like upstream's `ResolveBindAddress` it falls back to the host's own address: the IPv4 address of the
interface that carries the default route (upstream's `ChooseHostInterface`).
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path

ROUTES = Path("/proc/net/route")
_SIOCGIFADDR = 0x8915
_RTF_UP = 0x1
_RTF_GATEWAY = 0x2


class NoHostAddress(Exception):
    """No default route with a usable IPv4 address: the caller must be given an address explicitly."""


def _default_route_interfaces(routes: Path) -> list[str]:
    """Interfaces of the IPv4 default routes, lowest metric first."""
    found: list[tuple[int, str]] = []
    for line in routes.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, destination, flags, metric, mask = fields[0], fields[1], int(fields[3], 16), int(fields[6]), fields[7]
        if destination == "00000000" and mask == "00000000" and flags & _RTF_UP and flags & _RTF_GATEWAY:
            found.append((metric, iface))
    return [iface for _, iface in sorted(found)]


def _interface_address(iface: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def choose_host_address(routes: Path = ROUTES) -> str:
    """The global unicast IPv4 address of the interface carrying the default route."""
    try:
        interfaces = _default_route_interfaces(routes)
    except OSError as exc:
        raise NoHostAddress(f"cannot read {routes}: {exc}") from None
    for iface in interfaces:
        address = _interface_address(iface)
        if address and not _local_only(address):
            return address
    raise NoHostAddress("no default route with a usable IPv4 address found")


def _local_only(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


def resolve_bind_address(bind_address: str, routes: Path = ROUTES) -> str:
    """`bind_address` itself when others can reach it, else the host's address (wildcard or loopback)."""
    ip = ipaddress.ip_address(bind_address)
    if ip.is_unspecified or ip.is_loopback:
        return choose_host_address(routes)
    return bind_address

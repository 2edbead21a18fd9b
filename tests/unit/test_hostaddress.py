"""The address an apiserver advertises by default, chosen as upstream's ResolveBindAddress/ChooseHostInterface."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from services.runtime.hostaddress import NoHostAddress, choose_host_address, resolve_bind_address

HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


def routes(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "route"
    path.write_text(HEADER + "".join(line + "\n" for line in lines))
    return path


def test_a_specific_bind_address_is_advertised_as_it_is(tmp_path: Path) -> None:
    assert resolve_bind_address("10.1.2.3", routes(tmp_path)) == "10.1.2.3"


@pytest.mark.parametrize("bind", ["0.0.0.0", "127.0.0.1"])
def test_wildcard_and_loopback_fall_back_to_the_default_route_interface(bind: str) -> None:
    defaults = [line.split() for line in Path("/proc/net/route").read_text().splitlines()[1:]
                if line.split()[1] == "00000000"]
    assert defaults, "this host has no default route to check against"
    gateway = socket.inet_ntoa(struct.pack("<I", int(defaults[0][2], 16)))
    # The kernel's own pick of a source address towards the default gateway (a UDP connect sends nothing).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((gateway, 9))
        source = probe.getsockname()[0]
    assert resolve_bind_address(bind) == source


def test_no_default_route_is_an_error_naming_the_cause(tmp_path: Path) -> None:
    only_local = routes(tmp_path, "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0")
    with pytest.raises(NoHostAddress, match="no default route"):
        resolve_bind_address("0.0.0.0", only_local)


def test_a_default_route_over_loopback_is_not_usable(tmp_path: Path) -> None:
    via_lo = routes(tmp_path, "lo\t00000000\t0100007F\t0003\t0\t0\t0\t00000000\t0\t0\t0")
    with pytest.raises(NoHostAddress):
        choose_host_address(via_lo)

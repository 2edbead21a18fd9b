"""Node CIDR allocation: the CIDR set's round-robin allocation, occupy/release, exhaustion, the
Service range carved out, and the flag rules for mask sizes and dual stack.
"""

from __future__ import annotations

import argparse

import pytest

from controller_manager.controllers.nodeipam.cidrset import CIDRSet, CIDRSetFull
from controller_manager.controllers.nodeipam.controller import build_cidr_sets, node_cidrs, node_masks


def options(**values: object) -> argparse.Namespace:
    defaults: dict[str, object] = {"cluster_cidr": "10.244.0.0/16", "node_cidr_mask_size": 0,
                                   "node_cidr_mask_size_ipv4": 0, "node_cidr_mask_size_ipv6": 0,
                                   "service_cluster_ip_range": "", "secondary_service_cluster_ip_range": ""}
    return argparse.Namespace(**{**defaults, **values})


def test_allocates_distinct_subnets_until_full() -> None:
    cidrs = CIDRSet("10.244.0.0/22", 24)
    got = [cidrs.allocate_next() for _ in range(4)]
    assert got == ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"]
    with pytest.raises(CIDRSetFull):
        cidrs.allocate_next()
    cidrs.release("10.244.2.0/24")
    assert cidrs.allocate_next() == "10.244.2.0/24"
    assert cidrs.allocated == 4


def test_round_robin_continues_after_last_allocation() -> None:
    cidrs = CIDRSet("10.0.0.0/16", 24)
    assert [cidrs.allocate_next() for _ in range(3)] == ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"]
    cidrs.release("10.0.0.0/24")
    assert cidrs.allocate_next() == "10.0.3.0/24"


def test_occupy_skips_existing_and_wider_ranges() -> None:
    cidrs = CIDRSet("10.0.0.0/21", 24)
    cidrs.occupy("10.0.1.0/24")
    cidrs.occupy("10.0.4.0/23")
    got = {cidrs.allocate_next() for _ in range(5)}
    assert got == {"10.0.0.0/24", "10.0.2.0/24", "10.0.3.0/24", "10.0.6.0/24", "10.0.7.0/24"}
    with pytest.raises(ValueError):
        cidrs.occupy("192.168.0.0/24")
    with pytest.raises(ValueError):
        cidrs.occupy("fd00::/64")


def test_ipv6_and_mask_limits() -> None:
    cidrs = CIDRSet("fd00:10:244::/56", 64)
    assert cidrs.allocate_next() == "fd00:10:244::/64"
    assert cidrs.allocate_next() == "fd00:10:244:1::/64"
    with pytest.raises(ValueError):
        CIDRSet("10.0.0.0/24", 16)
    with pytest.raises(ValueError):
        CIDRSet("10.0.0.0/8", 25)


def test_service_range_is_never_handed_out() -> None:
    (cidrs,) = build_cidr_sets(options(cluster_cidr="10.0.0.0/22", service_cluster_ip_range="10.0.1.0/24"))
    got = [cidrs.allocate_next() for _ in range(3)]
    assert "10.0.1.0/24" not in got and len(set(got)) == 3
    with pytest.raises(CIDRSetFull):
        cidrs.allocate_next()
    (wide,) = build_cidr_sets(options(cluster_cidr="10.0.0.0/22", service_cluster_ip_range="10.0.0.0/8"))
    with pytest.raises(CIDRSetFull):
        wide.allocate_next()
    (apart,) = build_cidr_sets(options(service_cluster_ip_range="10.96.0.0/12"))
    assert apart.allocated == 0


def test_mask_flags_and_dual_stack() -> None:
    assert node_masks(options(), [4]) == [24]
    assert node_masks(options(node_cidr_mask_size=26), [4]) == [26]
    assert node_masks(options(), [4, 6]) == [24, 64]
    assert node_masks(options(node_cidr_mask_size_ipv6=80), [6, 4]) == [80, 24]
    with pytest.raises(ValueError):
        node_masks(options(node_cidr_mask_size=24), [4, 6])
    with pytest.raises(ValueError):
        node_masks(options(node_cidr_mask_size=24, node_cidr_mask_size_ipv4=25), [4])
    v4, v6 = build_cidr_sets(options(cluster_cidr="10.244.0.0/16,fd00::/48"))
    assert (v4.node_mask, v6.node_mask) == (24, 64)
    with pytest.raises(ValueError):
        build_cidr_sets(options(cluster_cidr=""))
    with pytest.raises(ValueError):
        build_cidr_sets(options(cluster_cidr="10.0.0.0/16,10.1.0.0/16"))


def test_node_cidrs_reads_either_field() -> None:
    assert node_cidrs({"spec": {"podCIDR": "10.0.0.0/24"}}) == ["10.0.0.0/24"]
    assert node_cidrs({"spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}) == [
        "10.0.0.0/24", "fd00::/64"]
    assert node_cidrs({"spec": {}}) == []

"""A cluster CIDR cut into equal node subnets with a used-bit per subnet, handed out round-robin
from where the last allocation stopped, as upstream's cidrset does.
"""

from __future__ import annotations

import ipaddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: upstream's clusterSubnetMaxDiff: at most 2^16 node subnets per cluster CIDR
MAX_SUBNET_BITS = 16


class CIDRSetFull(Exception):  # noqa: N818 - upstream's ErrCIDRRangeNoCIDRsRemaining
    """No node subnet is left in the cluster CIDR."""


class CIDRSet:
    def __init__(self, cluster_cidr: str | IPNetwork, node_mask: int) -> None:
        self.cluster = ipaddress.ip_network(cluster_cidr, strict=False)
        if node_mask < self.cluster.prefixlen:
            raise ValueError(f"node CIDR mask /{node_mask} is larger than cluster CIDR {self.cluster}")
        if node_mask > self.cluster.max_prefixlen:
            raise ValueError(f"node CIDR mask /{node_mask} is too long for {self.cluster}")
        if node_mask - self.cluster.prefixlen > MAX_SUBNET_BITS:
            raise ValueError(f"node CIDR mask /{node_mask} cuts {self.cluster} into more than "
                             f"2^{MAX_SUBNET_BITS} subnets")
        self.node_mask = node_mask
        self.size = 1 << (node_mask - self.cluster.prefixlen)
        self._shift = self.cluster.max_prefixlen - node_mask
        self._base = int(self.cluster.network_address)
        self._used: set[int] = set()
        self._next = 0

    @property
    def allocated(self) -> int:
        return len(self._used)

    def _subnet(self, index: int) -> str:
        address = ipaddress.ip_address(self._base + (index << self._shift))
        return f"{address}/{self.node_mask}"

    def allocate_next(self) -> str:
        for step in range(self.size):
            candidate = (self._next + step) % self.size
            if candidate not in self._used:
                self._used.add(candidate)
                self._next = (candidate + 1) % self.size
                return self._subnet(candidate)
        raise CIDRSetFull(f"no remaining CIDRs left to allocate in {self.cluster}")

    def _indices(self, cidr: str | IPNetwork) -> range:
        """The node subnets `cidr` overlaps; ValueError when it lies outside the cluster CIDR."""
        network = ipaddress.ip_network(cidr, strict=False)
        if network.version != self.cluster.version or not network.overlaps(self.cluster):
            raise ValueError(f"{network} is not within the cluster CIDR {self.cluster}")
        low = max(int(network.network_address), self._base) - self._base
        high = min(int(network.broadcast_address), int(self.cluster.broadcast_address)) - self._base
        return range(low >> self._shift, (high >> self._shift) + 1)

    def occupy(self, cidr: str | IPNetwork) -> None:
        """Mark every node subnet overlapping `cidr` used (a node's existing CIDR, the service range)."""
        self._used.update(self._indices(cidr))

    def release(self, cidr: str | IPNetwork) -> None:
        self._used.difference_update(self._indices(cidr))

    def contains(self, cidr: str) -> bool:
        network = ipaddress.ip_network(cidr, strict=False)
        return network.version == self.cluster.version and network.subnet_of(self.cluster)  # type: ignore[arg-type]

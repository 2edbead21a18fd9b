"""The node IPAM controller: `controller` gives each Node its pod CIDRs; `cidrset` is the pool of
one cluster CIDR it allocates them from."""

from controller_manager.controllers.nodeipam.controller import NAME, add_flags, new

__all__ = ["NAME", "add_flags", "new"]

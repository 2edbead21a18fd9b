"""Cluster DNS for pyk8s: the zone from Services and EndpointSlices, everything else forwarded."""

"""PodTopologySpread: maxSkew across topology domains, hard (Filter) and soft (Score)."""

from scheduler.plugins.podtopologyspread.pod_topology_spread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)

__all__ = ["ERR_REASON_CONSTRAINTS_NOT_MATCH", "ERR_REASON_NODE_LABEL_NOT_MATCH", "PodTopologySpread"]

"""TaintToleration: NoSchedule/NoExecute taints filter; PreferNoSchedule taints lower the score."""

from scheduler.plugins.tainttoleration.taint_toleration import TaintToleration

__all__ = ["TaintToleration"]

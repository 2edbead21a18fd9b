"""NodeResourcesFit and NodeResourcesBalancedAllocation."""

from scheduler.plugins.noderesources.balanced import BalancedAllocation
from scheduler.plugins.noderesources.fit import Fit

__all__ = ["BalancedAllocation", "Fit"]

"""Plugins by name: the in-tree set (imported lazily, one package each) plus any registered at run time."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.framework.interface import Handle, Plugin

PluginFactory = Callable[[Mapping[str, Any], Handle], Plugin]

# name -> "module:Class". Each in-tree plugin lives in scheduler/plugins/<package>/.
IN_TREE: dict[str, str] = {
    "PrioritySort": "scheduler.plugins.queuesort:PrioritySort",
    "SchedulingGates": "scheduler.plugins.schedulinggates:SchedulingGates",
    "NodeUnschedulable": "scheduler.plugins.nodeunschedulable:NodeUnschedulable",
    "NodeName": "scheduler.plugins.nodename:NodeName",
    "TaintToleration": "scheduler.plugins.tainttoleration:TaintToleration",
    "NodeAffinity": "scheduler.plugins.nodeaffinity:NodeAffinity",
    "NodePorts": "scheduler.plugins.nodeports:NodePorts",
    "NodeResourcesFit": "scheduler.plugins.noderesources:Fit",
    "NodeResourcesBalancedAllocation": "scheduler.plugins.noderesources:BalancedAllocation",
    "ImageLocality": "scheduler.plugins.imagelocality:ImageLocality",
    "DefaultBinder": "scheduler.plugins.defaultbinder:DefaultBinder",
    "InterPodAffinity": "scheduler.plugins.interpodaffinity:InterPodAffinity",
    "PodTopologySpread": "scheduler.plugins.podtopologyspread:PodTopologySpread",
    "VolumeBinding": "scheduler.plugins.volumebinding:VolumeBinding",
    "VolumeRestrictions": "scheduler.plugins.volumerestrictions:VolumeRestrictions",
    "VolumeZone": "scheduler.plugins.volumezone:VolumeZone",
    "DefaultPreemption": "scheduler.plugins.defaultpreemption:DefaultPreemption",
}

_extra: dict[str, PluginFactory] = {}


def register(name: str, factory: PluginFactory) -> None:
    """Add an out-of-tree plugin (or replace an in-tree one) under `name`."""
    _extra[name] = factory


def lookup(name: str) -> PluginFactory:
    """The factory for `name`; KeyError for unknown names, ImportError when its package is missing."""
    if name in _extra:
        return _extra[name]
    target = IN_TREE[name]
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def available(name: str) -> bool:
    """Whether `name` can be constructed here (its package imports)."""
    try:
        lookup(name)
    except (KeyError, ImportError, AttributeError):
        return False
    return True

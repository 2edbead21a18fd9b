"""What every controller is built from: one client, one shared informer factory, event
recorders and the parsed flags, shared by all controllers in the process.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from controller_manager.events import EventBroadcaster, EventRecorder
from services.client import Client
from services.client.rest import ResourceType
from services.informers import Informer, SharedInformerFactory


@dataclass
class ControllerContext:
    """Handed to each controller's constructor; informers asked for here are started after construction."""

    client: Client
    informers: SharedInformerFactory
    options: argparse.Namespace
    broadcaster: EventBroadcaster
    #: Informers created through informer() by the controllers, so the manager knows what to wait for.
    requested: list[Informer] = field(default_factory=list)

    def informer(self, resource: ResourceType) -> Informer:
        """The shared informer of a resource across all namespaces."""
        informer = self.informers.informer_for(resource)
        if informer not in self.requested:
            self.requested.append(informer)
        return informer

    def recorder(self, component: str) -> EventRecorder:
        """An event recorder that signs events with `component` (e.g. "replicaset-controller")."""
        return self.broadcaster.recorder(component)

    def option(self, name: str, default: object = None) -> object:
        """A flag's value by its attribute name (e.g. "concurrent_replicaset_syncs")."""
        return getattr(self.options, name, default)

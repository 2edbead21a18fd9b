"""Restart and image-pull back-off: upstream's kubelet delays (10 s doubling to 5 min) on flowcontrol's Backoff."""

from __future__ import annotations

from services.client.flowcontrol import Backoff as FlowBackoff

INITIAL = 10.0
MAXIMUM = 300.0
RESET_AFTER_RUNNING = 600.0


class Backoff(FlowBackoff):
    def __init__(self, initial: float = INITIAL, maximum: float = MAXIMUM) -> None:
        super().__init__(initial, maximum)

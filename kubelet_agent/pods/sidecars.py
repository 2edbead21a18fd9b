"""Restartable init containers (sidecars, upstream's KEP-753): an init container with
`restartPolicy: Always` starts in its turn, lets the next init container go once it has started
(its startup probe passed, or it runs and has none), is restarted whenever it exits for as long as
the pod runs, is probed and counts toward readiness like an app container, and is stopped only
after the app containers, so their preStop hooks can still use it."""

from __future__ import annotations

from typing import Any


def is_sidecar(container: dict[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def names(spec: dict[str, Any]) -> set[str]:
    return {c["name"] for c in spec.get("initContainers") or [] if is_sidecar(c)}


def started(container: dict[str, Any], running: bool, probed_started: bool | None) -> bool:
    """A running sidecar has started once its startup probe passed; without one, once it runs."""
    if not running:
        return False
    return bool(probed_started) if container.get("startupProbe") else True

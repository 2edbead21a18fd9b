"""CycleState: the scratch space of one scheduling cycle (upstream's `framework/cycle_state.go`)."""

from __future__ import annotations

from typing import Any


class CycleState:
    """Per-cycle scratch space plugins share between their extension points (keyed by plugin)."""

    __slots__ = ("_data", "skip_filter_plugins", "skip_score_plugins", "skip_pre_bind_plugins", "nodes_start")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.skip_pre_bind_plugins: set[str] = set()
        # When the nodes being scored are the snapshot's list rotated to begin at this position (no node
        # was filtered out), that position, else -1: a hint that lets scorers keep results per position.
        self.nodes_start = -1

    def read(self, key: str) -> Any:
        """The value stored under `key`; KeyError when a PreFilter/PreScore did not write it."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        """A copy for what-if runs (preemption): values with a `clone()` method are cloned too."""
        other = CycleState()
        other._data = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in self._data.items()}
        other.skip_filter_plugins = set(self.skip_filter_plugins)
        other.skip_score_plugins = set(self.skip_score_plugins)
        other.skip_pre_bind_plugins = set(self.skip_pre_bind_plugins)
        other.nodes_start = self.nodes_start
        return other

"""Restart and image-pull back-off: 10 s doubling to 5 min, like upstream's flowcontrol.Backoff."""

from __future__ import annotations

import time

INITIAL = 10.0
MAXIMUM = 300.0
RESET_AFTER_RUNNING = 600.0


class Backoff:
    """Per-key exponential back-off measured from the moment of the last failure."""

    def __init__(self, initial: float = INITIAL, maximum: float = MAXIMUM) -> None:
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, tuple[float, float]] = {}

    def in_backoff(self, key: str, since: float, now: float | None = None) -> float:
        """Seconds still to wait after a failure at `since` (0 when free to go)."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        remaining = since + entry[0] - (time.time() if now is None else now)
        return max(0.0, remaining)

    def next(self, key: str, now: float | None = None) -> float:
        """Record one more attempt; the next wait after a failure. Long quiet periods start over."""
        now = time.time() if now is None else now
        entry = self._entries.get(key)
        if entry is None or now - entry[1] > 2 * self.maximum:
            delay = self.initial
        else:
            delay = min(entry[0] * 2, self.maximum)
        self._entries[key] = (delay, now)
        return delay

    def current(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry[0] if entry else 0.0

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]

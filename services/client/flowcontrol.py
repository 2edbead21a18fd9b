"""Per-key exponential back-off, as client-go's flowcontrol.Backoff: each failure doubles the key's delay
up to a cap, and a key left alone for twice the cap starts over from the initial delay."""

from __future__ import annotations

import time


class Backoff:
    """Delays per key, measured from the moment of the last recorded attempt (wall-clock seconds)."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        #: key -> (current delay, time of the last update)
        self._entries: dict[str, tuple[float, float]] = {}

    def in_backoff(self, key: str, since: float, now: float | None = None) -> float:
        """Seconds still to wait after a failure at `since` (0 when free to go)."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        remaining = since + entry[0] - (time.time() if now is None else now)
        return max(0.0, remaining)

    def in_backoff_since_update(self, key: str, now: float | None = None) -> bool:
        """Whether the key's delay, counted from its last next(), has not passed yet (IsInBackOffSinceUpdate)."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        now = time.time() if now is None else now
        if self._expired(entry, now):
            return False
        return now - entry[1] < entry[0]

    def next(self, key: str, now: float | None = None) -> float:
        """Record one more attempt; the next wait after a failure. Long quiet periods start over."""
        now = time.time() if now is None else now
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
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

    def gc(self, now: float | None = None) -> None:
        """Drop keys quiet for longer than twice the cap (they would start over anyway)."""
        now = time.time() if now is None else now
        for key in [k for k, e in self._entries.items() if self._expired(e, now)]:
            del self._entries[key]

    def _expired(self, entry: tuple[float, float], now: float) -> bool:
        return now - entry[1] > 2 * self.maximum

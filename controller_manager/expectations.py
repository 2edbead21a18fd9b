"""Controller expectations: how many creates and deletes a controller is still waiting to see
in its informer, so a sync that runs before the cache catches up does not act twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

#: Upstream's ExpectationsTimeout: expectations older than this are assumed lost.
EXPECTATIONS_TIMEOUT = 300.0


@dataclass
class Expectation:
    add: int = 0
    delete: int = 0
    timestamp: float = field(default_factory=time.monotonic)
    #: uids of pods we asked to delete and have not yet seen go (UIDTrackingControllerExpectations)
    deleting: set[str] = field(default_factory=set)

    def fulfilled(self) -> bool:
        return self.add <= 0 and self.delete <= 0

    def expired(self, now: float) -> bool:
        return now - self.timestamp > EXPECTATIONS_TIMEOUT


class Expectations:
    """Per controller key; a key with no record is satisfied (nothing in flight)."""

    def __init__(self) -> None:
        self._items: dict[str, Expectation] = {}

    def satisfied(self, key: str) -> bool:
        exp = self._items.get(key)
        return exp is None or exp.fulfilled() or exp.expired(time.monotonic())

    def expect(self, key: str, adds: int = 0, deletes: int = 0, deleting: set[str] | None = None) -> None:
        """Replace the record: the sync about to issue `adds` creates and `deletes` deletes."""
        self._items[key] = Expectation(adds, deletes, deleting=set(deleting or ()))

    def expect_creations(self, key: str, adds: int) -> None:
        self.expect(key, adds=adds)

    def expect_deletions(self, key: str, uids: set[str]) -> None:
        self.expect(key, deletes=len(uids), deleting=set(uids))

    def creation_observed(self, key: str) -> None:
        exp = self._items.get(key)
        if exp is not None:
            exp.add -= 1

    def deletion_observed(self, key: str, uid: str | None = None) -> None:
        """One of our deletes landed; with a uid, only count it if it was one we asked for."""
        exp = self._items.get(key)
        if exp is None:
            return
        if uid is not None and exp.deleting:
            if uid not in exp.deleting:
                return
            exp.deleting.discard(uid)
        exp.delete -= 1

    def lower(self, key: str, adds: int = 0, deletes: int = 0) -> None:
        """Requests that failed or were skipped will never be observed."""
        exp = self._items.get(key)
        if exp is not None:
            exp.add -= adds
            exp.delete -= deletes

    def get(self, key: str) -> Expectation | None:
        return self._items.get(key)

    def delete(self, key: str) -> None:
        self._items.pop(key, None)

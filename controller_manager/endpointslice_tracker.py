"""The EndpointSlices a controller manages, like upstream's k8s.io/endpointslice tracker: the
generation of every slice this process wrote, so a sync tells a stale cache from someone else's
change, and the informer handlers that requeue a Service when one of its slices changes.
"""

from __future__ import annotations

from typing import Any

from controller_manager.endpointutil import LABEL_MANAGED_BY, LABEL_SERVICE_NAME, service_key

Obj = dict[str, Any]

#: generation recorded for a slice this process deleted
_DELETION_EXPECTED = -1


class SliceTracker:
    """The generation of every EndpointSlice this controller last wrote, by Service, so a sync can
    tell a stale cache (its own write not seen yet) from a change made by someone else.
    """

    def __init__(self) -> None:
        self._by_service: dict[str, dict[str, int]] = {}

    @staticmethod
    def _service_of(slice_: Obj) -> str:
        meta = slice_.get("metadata") or {}
        return service_key(meta.get("namespace") or "", (meta.get("labels") or {}).get(LABEL_SERVICE_NAME, ""))

    def has(self, slice_: Obj) -> bool:
        return slice_["metadata"].get("uid") in self._by_service.get(self._service_of(slice_), {})

    def should_sync(self, slice_: Obj) -> bool:
        """True when the cached slice is not one of our own writes (unknown, or newer than ours)."""
        recorded = self._by_service.get(self._service_of(slice_), {}).get(slice_["metadata"].get("uid", ""))
        return recorded is None or int(slice_["metadata"].get("generation") or 0) > recorded

    def stale(self, key: str, slices: list[Obj]) -> bool:
        """The cache lacks a write of ours, or still holds a slice we deleted."""
        recorded = self._by_service.get(key)
        if not recorded:
            return False
        present = set()
        for slice_ in slices:
            uid = slice_["metadata"].get("uid", "")
            present.add(uid)
            generation = recorded.get(uid)
            if generation is not None and (
                generation == _DELETION_EXPECTED or generation > int(slice_["metadata"].get("generation") or 0)
            ):
                return True
        return any(g != _DELETION_EXPECTED and uid not in present for uid, g in recorded.items())

    def update(self, slice_: Obj) -> None:
        meta = slice_["metadata"]
        self._by_service.setdefault(self._service_of(slice_), {})[meta["uid"]] = int(meta.get("generation") or 0)

    def expect_deletion(self, slice_: Obj) -> None:
        uid = slice_["metadata"].get("uid")
        if uid:
            self._by_service.setdefault(self._service_of(slice_), {})[uid] = _DELETION_EXPECTED

    def handle_deletion(self, slice_: Obj) -> bool:
        """Forget a deleted slice; True when we had not deleted it ourselves."""
        key = self._service_of(slice_)
        recorded = self._by_service.get(key, {})
        generation = recorded.pop(slice_["metadata"].get("uid", ""), None)
        if not recorded:
            self._by_service.pop(key, None)
        return generation != _DELETION_EXPECTED

    def forget_service(self, key: str) -> None:
        self._by_service.pop(key, None)


def managed_service_key(slice_: dict[str, Any], controller_name: str) -> str | None:
    """The Service key a slice belongs to when `controller_name` manages it."""
    meta = slice_.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != controller_name or not labels.get(LABEL_SERVICE_NAME):
        return None
    return service_key(meta.get("namespace") or "", labels[LABEL_SERVICE_NAME])


class ManagedSlices:
    """What the EndpointSlice and mirroring controllers share about the slices they manage: a change
    to one requeues its Service (unless it is the controller's own write, per the tracker)."""

    controller_name: str
    tracker: SliceTracker
    slices: Any
    queue: Any

    def _slice_changed(self, slice_: dict[str, Any]) -> None:
        key = managed_service_key(slice_, self.controller_name)
        if key is not None and self.tracker.should_sync(slice_):
            self.queue.add(key)

    def _slice_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        previous = managed_service_key(old, self.controller_name)
        if previous is not None and previous != managed_service_key(new, self.controller_name):
            self.queue.add(previous)
        self._slice_changed(new)

    def _slice_deleted(self, slice_: dict[str, Any]) -> None:
        key = managed_service_key(slice_, self.controller_name)
        if key is not None and self.tracker.handle_deletion(slice_):
            self.queue.add(key)

    def managed_slices(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [s for s in self.slices.store.by_label(LABEL_SERVICE_NAME, name)
                if s["metadata"].get("namespace") == namespace
                and (s["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == self.controller_name]

from __future__ import annotations

from scheduler.framework.cache import Cache
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.plugins.imagelocality import ImageLocality
from tests.unit.scheduler.util import FakeHandle, make_node, make_pod

MB = 1024 * 1024


def test_prefers_nodes_with_the_image_scaled_by_spread() -> None:
    cache = Cache()
    big = make_node("big")
    big["status"]["images"] = [{"names": ["nginx:latest"], "sizeBytes": 500 * MB}]
    small = make_node("small")
    small["status"]["images"] = [{"names": ["nginx:latest"], "sizeBytes": 500 * MB}]
    for n in (big, small, make_node("none")):
        cache.add_node(n)
    snap = Snapshot()
    cache.update_snapshot(snap)
    pl = ImageLocality({}, FakeHandle(snap))  # type: ignore[arg-type]
    pod = make_pod("p")
    s_big = pl.score(CycleState(), pod, snap.get("big"))[0]
    s_none = pl.score(CycleState(), pod, snap.get("none"))[0]
    assert s_none == 0
    # 500MB * 2/3 nodes = 333MB; (333-23)/(1000-23) * 100 = 31
    assert s_big == 31
    assert pl.score(CycleState(), make_pod("q"), snap.get("small"))[0] == s_big


def test_small_images_below_threshold_score_zero() -> None:
    cache = Cache()
    n = make_node("n")
    n["status"]["images"] = [{"names": ["nginx:latest"], "sizeBytes": 10 * MB}]
    cache.add_node(n)
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert ImageLocality({}, FakeHandle(snap)).score(CycleState(), make_pod("p"), snap.get("n"))[0] == 0  # type: ignore[arg-type]

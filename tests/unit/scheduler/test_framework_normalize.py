"""The framework normalizes plain score lists (`normalize_values`); each override must agree with the
plugin's `normalize_score` over NodeScore objects."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import NodeScore, Plugin
from scheduler.framework.types import NodeInfo
from scheduler.plugins.interpodaffinity import InterPodAffinity
from scheduler.plugins.interpodaffinity.inter_pod_affinity import PRE_SCORE_STATE_KEY as IPA_KEY
from scheduler.plugins.interpodaffinity.inter_pod_affinity import PreScoreState as IpaScore
from scheduler.plugins.nodeaffinity import NodeAffinity
from scheduler.plugins.podtopologyspread import PodTopologySpread
from scheduler.plugins.podtopologyspread.pod_topology_spread import PRE_SCORE_STATE_KEY as PTS_KEY
from scheduler.plugins.podtopologyspread.pod_topology_spread import PreScoreState as PtsScore
from scheduler.plugins.tainttoleration import TaintToleration
from tests.unit.scheduler.util import make_node, make_pod


def plugins() -> list[Plugin]:
    handle = SimpleNamespace(informer_factory=None, snapshot_shared_lister=lambda: None, namespace_labels=dict.get)
    return [TaintToleration({}, handle), NodeAffinity({}, handle),  # type: ignore[arg-type]
            PodTopologySpread({"defaultingType": "List"}, handle),  # type: ignore[arg-type]
            InterPodAffinity({}, handle)]  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(30))
def test_normalize_values_agrees_with_normalize_score(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [NodeInfo(make_node(f"n{i}")) for i in range(rng.randint(1, 8))]
    state = CycleState()
    pts = PtsScore()
    pts.ignored_nodes = {ni.name for ni in nodes if rng.random() < 0.3}
    state.write(PTS_KEY, pts)
    ipa = IpaScore()
    ipa.topology_score = {"k": {"v": 1}}
    state.write(IPA_KEY, ipa)
    pod = make_pod("p")
    for pl in plugins():
        low = -300 if isinstance(pl, InterPodAffinity) else 0
        values = [rng.choice([0, 0, rng.randint(low, 300)]) for _ in nodes]
        scores = [NodeScore(ni.name, v) for ni, v in zip(nodes, values, strict=True)]
        pl.normalize_score(state, pod, scores)
        got, st = pl.normalize_values(state, pod, nodes, list(values))
        assert st is None
        assert got == [s.score for s in scores], (pl.name, values)

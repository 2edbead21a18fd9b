"""The informer cache's indexes stay exactly what recomputing them from the stored objects gives,
through adds, updates that change or keep index values, and deletes."""

from __future__ import annotations

import random
from typing import Any

from services.informers import Store
from services.informers.store import BUILTIN_INDEXERS, LABEL_INDEX, NODE_NAME_INDEX, OWNER_UID_INDEX


def obj(name: str, rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": rng.choice(["a", "b"]),
                            "labels": {"app": rng.choice(["web", "api"])}}
    if rng.random() < 0.5:
        meta["labels"]["tier"] = "f"
    if rng.random() < 0.5:
        meta["ownerReferences"] = [{"uid": rng.choice(["u1", "u2"]), "controller": True}]
    spec = {"nodeName": rng.choice(["n1", "n2"])} if rng.random() < 0.5 else {}
    return {"metadata": meta, "spec": spec, "status": {"phase": rng.choice(["Pending", "Running"])}}


def test_indexes_match_a_rebuild_after_random_writes() -> None:
    rng = random.Random(3)
    store = Store(indexers=BUILTIN_INDEXERS)
    names = [f"o{i}" for i in range(30)]
    for _ in range(3000):
        name = rng.choice(names)
        if rng.random() < 0.15:
            store.delete_key(next((k for k in store.list_keys() if k.endswith(f"/{name}")), name))
        else:
            current = next((o for o in store.list() if o["metadata"]["name"] == name), None)
            fresh = obj(name, rng)
            if current is not None:
                fresh["metadata"]["namespace"] = current["metadata"]["namespace"]
            store.add(fresh)
    rebuilt = Store(indexers=BUILTIN_INDEXERS)
    rebuilt.replace(store.list())
    assert len(store) > 5
    for index in BUILTIN_INDEXERS:
        assert sorted(store.index_values(index)) == sorted(rebuilt.index_values(index))
        for value in rebuilt.index_values(index):
            assert store.index_keys(index, value) == rebuilt.index_keys(index, value)
    assert {LABEL_INDEX, NODE_NAME_INDEX, OWNER_UID_INDEX} <= set(BUILTIN_INDEXERS)

"""The kubelet's certificate file store and rotation deadline: pairs land as `<prefix>-<time>.pem` behind an
atomically swapped `-current.pem` link, a pair whose key does not match is not used, and the rotation
deadline falls between 70 % and 90 % of the lifetime as upstream's certificate manager picks it."""

from __future__ import annotations

import datetime
from pathlib import Path

from kubelet_agent.certificate.manager import rotation_deadline
from kubelet_agent.certificate.request import new_key
from kubelet_agent.certificate.store import FileStore, Pair
from services.runtime import pki


def test_store_swaps_current_and_refuses_a_mismatched_key(tmp_path: Path) -> None:
    ca = pki.create_ca("store-ca")
    first = pki.issue_client_cert(ca, "system:node:a", ["system:nodes"])
    store = FileStore(tmp_path)
    assert store.load() is None
    path1 = store.update(first.cert_pem(), first.key)
    assert store.current.is_symlink() and store.current.resolve() == path1
    loaded = store.load()
    assert loaded is not None and loaded.cert == first.cert
    second = pki.issue_client_cert(ca, "system:node:a", ["system:nodes"])
    path2 = store.update(second.cert_pem(), second.key)
    assert path1.exists() and store.current.resolve() == path2
    loaded = store.load()
    assert loaded is not None and loaded.cert == second.cert
    store.update(first.cert_pem(), new_key())
    assert store.load() is None


def test_rotation_deadline_is_between_70_and_90_percent_of_the_lifetime() -> None:
    cert = pki.issue_client_cert(pki.create_ca("deadline-ca"), "system:node:a")
    pair = Pair(cert.cert, cert.key)
    start, end = cert.cert.not_valid_before_utc, cert.cert.not_valid_after_utc
    life = end - start
    assert rotation_deadline(pair, lambda: 0.0) == start + life * 0.7
    assert rotation_deadline(pair, lambda: 1.0) == start + life * 0.9
    assert start + life * 0.7 <= rotation_deadline(pair) <= start + life * 0.9
    assert rotation_deadline(pair) > datetime.datetime.now(datetime.UTC)

"""client-go's flowcontrol.Backoff semantics, which the kubelet and the DaemonSet controller share."""

from __future__ import annotations

from services.client.flowcontrol import Backoff


def test_in_backoff_since_update_doubles_and_starts_over_after_a_quiet_spell() -> None:
    b = Backoff(1.0, 8.0)
    assert not b.in_backoff_since_update("k", now=0.0)
    assert b.next("k", now=0.0) == 1.0
    assert b.in_backoff_since_update("k", now=0.5)
    assert not b.in_backoff_since_update("k", now=1.0)
    assert [b.next("k", now=t) for t in (1.0, 3.0, 7.0, 15.0)] == [2.0, 4.0, 8.0, 8.0]
    assert b.in_backoff_since_update("k", now=22.0) and not b.in_backoff_since_update("k", now=23.0)
    # Quiet for more than twice the cap: the key has expired and starts from the initial delay.
    assert not b.in_backoff_since_update("k", now=40.0)
    b.gc(now=40.0)
    assert b.current("k") == 0.0
    assert b.next("k", now=40.0) == 1.0

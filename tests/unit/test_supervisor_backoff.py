"""The supervisor's restart delays: 1 s doubling to 30 s, back to 1 s once a process ran for 60 s."""

from deploy.supervisor import Backoff


def test_delays_double_up_to_thirty_seconds_and_reset_after_a_healthy_minute() -> None:
    backoff = Backoff(started=0.0)
    now, delays = 0.0, []
    for _ in range(7):
        now += 5.0  # each restart dies 5 s later: never healthy for a minute
        due = backoff.died(now)
        assert backoff.died(now + 0.1) == due, "asking again while waiting does not push the restart back"
        delays.append(due - now)
        now = due
        backoff.restarted(now)
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    now += 61.0
    assert backoff.died(now) - now == 1.0

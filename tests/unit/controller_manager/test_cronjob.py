"""Cron parsing and next-time computation (including across DST), missed start times, and the
CronJob controller's pure decisions."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest

from controller_manager.controllers.cronjob.controller import (
    ScaledClock,
    history_to_delete,
    job_from_template,
    job_name,
    next_schedule_time,
    too_late,
)
from controller_manager.controllers.cronjob.schedule import (
    MAX_MISSED,
    EverySchedule,
    ScheduleError,
    SpecSchedule,
    missed_schedules,
    parse,
)

NY = zoneinfo.ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def times(schedule: str, start: datetime, n: int, zone: zoneinfo.ZoneInfo | None = None) -> list[datetime]:
    sched = parse(schedule, zone or UTC)
    out = []
    t = start
    for _ in range(n):
        t = sched.next(t)  # type: ignore[assignment]
        out.append(t)
    return out


def test_fields_ranges_steps_lists_and_names() -> None:
    sched = parse("*/15 9-17 * JAN,mar MON-FRI")
    assert isinstance(sched, SpecSchedule)
    assert sched.minutes == {0, 15, 30, 45}
    assert sched.hours == set(range(9, 18))
    assert sched.months == {1, 3}
    assert sched.weekdays == {1, 2, 3, 4, 5}
    assert parse("5/20 * * * *").minutes == {5, 25, 45}  # type: ignore[attr-defined]
    assert parse("1-10/3 * * * *").minutes == {1, 4, 7, 10}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("macro", "spec"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ],
)
def test_descriptors(macro: str, spec: str) -> None:
    assert parse(macro) == parse(spec)


def test_every() -> None:
    sched = parse("@every 1m30s")
    assert sched == EverySchedule(90)
    assert sched.next(utc(2024, 1, 1, 0, 0, 0)) == utc(2024, 1, 1, 0, 1, 30)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
        ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ("TZ=UTC * * * * *", "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
        (
            "CRON_TZ=Europe/Paris 0 * * * *",
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
    ],
)
def test_errors(schedule: str, message: str) -> None:
    with pytest.raises(ScheduleError) as err:
        parse(schedule)
    assert str(err.value) == message


def test_next_times() -> None:
    assert times("*/20 * * * *", utc(2024, 1, 1, 10, 5), 3) == [
        utc(2024, 1, 1, 10, 20),
        utc(2024, 1, 1, 10, 40),
        utc(2024, 1, 1, 11, 0),
    ]
    assert times("0 0 29 2 *", utc(2023, 1, 1), 1) == [utc(2024, 2, 29)]
    # On a boundary, the next time is strictly after.
    assert times("0 * * * *", utc(2024, 1, 1, 10, 0), 1) == [utc(2024, 1, 1, 11, 0)]
    assert parse("0 0 30 2 *").next(utc(2024, 1, 1)) is None


def test_day_of_month_or_day_of_week() -> None:
    # Both restricted: either matches (robfig, like Vixie cron).
    got = times("0 0 13 * 5", utc(2024, 9, 1), 3)
    assert got == [utc(2024, 9, 6), utc(2024, 9, 13), utc(2024, 9, 20)]
    # One starred: both must match.
    assert times("0 0 * * 5", utc(2024, 9, 1), 1) == [utc(2024, 9, 6)]
    # A stepped star is not a star.
    assert times("0 0 */10 * 1", utc(2024, 9, 1), 2) == [utc(2024, 9, 2), utc(2024, 9, 9)]


def test_time_zone_and_dst() -> None:
    # 09:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer.
    assert times("0 9 * * *", utc(2024, 3, 9, 15), 2, NY) == [
        datetime(2024, 3, 10, 9, tzinfo=NY),
        datetime(2024, 3, 11, 9, tzinfo=NY),
    ]
    got = times("0 9 * * *", utc(2024, 3, 9, 15), 2, NY)
    assert [t.astimezone(UTC).hour for t in got] == [13, 13]
    # 02:30 does not exist on 2024-03-10 in New York: that day is skipped.
    got = times("30 2 * * *", utc(2024, 3, 9, 12), 2, NY)
    assert [(t.month, t.day, t.hour, t.minute) for t in got] == [(3, 11, 2, 30), (3, 12, 2, 30)]
    # 01:30 happens twice on 2024-11-03 in New York: it fires at both instants, an hour apart.
    got = times("30 1 * * *", utc(2024, 11, 3, 0), 3, NY)
    assert got[1].astimezone(UTC) - got[0].astimezone(UTC) == timedelta(hours=1)
    assert [t.astimezone(UTC) for t in got[:2]] == [utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 6, 30)]
    assert got[2].astimezone(UTC) == utc(2024, 11, 4, 6, 30)
    # Hourly schedules keep firing every real hour across the jump forward.
    got = times("0 * * * *", datetime(2024, 3, 10, 0, 30, tzinfo=NY), 3, NY)
    assert [t.astimezone(UTC) - got[0].astimezone(UTC) for t in got] == [
        timedelta(0),
        timedelta(hours=1),
        timedelta(hours=2),
    ]


def test_missed_schedules() -> None:
    sched = parse("*/5 * * * *")
    recent, count = missed_schedules(sched, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 17))
    assert (recent, count) == (utc(2024, 1, 1, 10, 15), 3)
    assert missed_schedules(sched, utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 4)) == (None, 0)
    recent, count = missed_schedules(parse("* * * * *"), utc(2024, 1, 1), utc(2024, 1, 3, 7, 42, 10))
    assert count == MAX_MISSED + 1
    assert recent == utc(2024, 1, 3, 7, 42)


def cronjob(**spec: object) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "cj",
            "namespace": "ns",
            "uid": "u1",
            "creationTimestamp": "2024-01-01T10:00:00Z",
        },
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {"metadata": {"labels": {"a": "b"}}, "spec": {"template": {}}},
            **spec,
        },
        "status": {},
    }


def test_next_schedule_time_with_starting_deadline() -> None:
    cj = cronjob()
    now = utc(2024, 1, 1, 10, 17)
    recent, count, upcoming = next_schedule_time(cj, parse("*/5 * * * *"), now)
    assert (recent, count, upcoming) == (utc(2024, 1, 1, 10, 15), 3, utc(2024, 1, 1, 10, 20))
    cj = cronjob(startingDeadlineSeconds=60)
    recent, count, _ = next_schedule_time(cj, parse("*/5 * * * *"), now)
    assert (recent, count) == (None, 0)
    assert too_late(cronjob(startingDeadlineSeconds=60), utc(2024, 1, 1, 10, 15), now)
    assert not too_late(cronjob(startingDeadlineSeconds=200), utc(2024, 1, 1, 10, 15), now)
    cj = cronjob()
    cj["status"]["lastScheduleTime"] = "2024-01-01T10:15:00Z"
    assert next_schedule_time(cj, parse("*/5 * * * *"), now)[:2] == (None, 0)


def test_job_name_and_template() -> None:
    moment = utc(2024, 1, 1, 10, 15)
    assert job_name("cj", moment) == f"cj-{int(moment.timestamp()) // 60}"
    job = job_from_template(cronjob(), moment, NY)
    assert job["metadata"]["name"] == job_name("cj", moment)
    assert job["metadata"]["labels"] == {"a": "b"}
    assert (
        job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        == "2024-01-01T05:15:00-05:00"
    )
    assert job["metadata"]["ownerReferences"][0]["controller"] is True


def finished_job(name: str, kind: str, start: str) -> dict:
    return {
        "metadata": {"name": name, "creationTimestamp": start},
        "status": {"startTime": start, "conditions": [{"type": kind, "status": "True"}]},
    }


def test_history_to_delete() -> None:
    jobs = [finished_job(f"ok{i}", "Complete", f"2024-01-01T10:0{i}:00Z") for i in range(4)]
    jobs += [finished_job(f"bad{i}", "Failed", f"2024-01-01T10:0{i}:00Z") for i in range(2)]
    jobs.append({"metadata": {"name": "running"}, "status": {}})
    doomed = [j["metadata"]["name"] for j in history_to_delete(jobs, 2, 1)]
    assert doomed == ["ok0", "ok1", "bad0"]
    assert history_to_delete(jobs, None, None) == []


def test_scaled_clock() -> None:
    real = [1000.0]
    clock = ScaledClock(60, lambda: real[0])
    assert clock.now() == datetime.fromtimestamp(1000, UTC)
    real[0] += 2
    assert clock.now() == datetime.fromtimestamp(1120, UTC)
    assert clock.real_delay(60) == 1

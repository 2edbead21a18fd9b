"""Cron schedules as the CronJob controller reads them (robfig/cron's standard parser): five
fields with ranges, steps, lists and month/day names, the `@hourly`-style descriptors and
`@every <duration>`, evaluated on the wall clock of a time zone.

A schedule fires at every instant whose local wall-clock time matches it, so a time skipped by
a DST spring-forward never fires and one repeated by a fall-back fires twice, as robfig's
walk over absolute time does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo

from services.runtime.durations import go_duration

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
#: (low, high, names) per field: minute, hour, day of month, month, day of week
_BOUNDS = ((0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (0, 6, _DAYS))
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: robfig gives up looking for a match this many years ahead (e.g. "0 0 30 2 *" never fires)
_SEARCH_YEARS = 5


class ScheduleError(ValueError):
    """The schedule does not parse; the message is robfig's wording where it has one."""


class Schedule:
    def next(self, after: datetime) -> datetime | None:
        """The first firing strictly after `after` (aware), or None if there is none."""
        raise NotImplementedError


@dataclass(frozen=True)
class EverySchedule(Schedule):
    """`@every <duration>`: fixed intervals from the reference time, in whole seconds."""

    seconds: int

    def next(self, after: datetime) -> datetime | None:
        return after.replace(microsecond=0) + timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class SpecSchedule(Schedule):
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    #: robfig: when either day field was `*`/`?` both must match, otherwise either may
    day_star: bool
    zone: tzinfo

    def _day_matches(self, day: datetime) -> bool:
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        return (dom and dow) if self.day_star else (dom or dow)

    def next(self, after: datetime) -> datetime | None:
        after = after.astimezone(UTC)
        local = after.astimezone(self.zone)
        day = datetime(local.year, local.month, local.day) - timedelta(days=1)
        limit = day + timedelta(days=366 * _SEARCH_YEARS)
        hours, minutes = sorted(self.hours), sorted(self.minutes)
        # Wall times before `after` (by more than a DST shift, if one is near) cannot be after it:
        # skip them unconverted.
        shift = (after - timedelta(hours=3)).astimezone(self.zone).utcoffset() != (
            after + timedelta(hours=3)
        ).astimezone(self.zone).utcoffset()
        floor = local.replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=3 if shift else 0)
        while day <= limit:
            if day.month in self.months and self._day_matches(day):
                best = self._first_in_day(day, hours, minutes, after, floor)
                if best is not None:
                    return best.astimezone(self.zone)
            day += timedelta(days=1)
        return None

    def _first_in_day(
        self,
        day: datetime,
        hours: list[int],
        minutes: list[int],
        after: datetime,
        floor: datetime,
    ) -> datetime | None:
        best: datetime | None = None
        for hour in hours:
            if datetime.combine(day.date(), time(hour, 59)) < floor:
                continue
            for minute in minutes:
                if datetime.combine(day.date(), time(hour, minute)) < floor:
                    continue
                instants = set()
                for fold in (0, 1):
                    wall = datetime.combine(day.date(), time(hour, minute), tzinfo=self.zone).replace(
                        fold=fold
                    )
                    instant = wall.astimezone(UTC)
                    back = instant.astimezone(self.zone)
                    if (back.hour, back.minute, back.day) != (hour, minute, day.day):
                        continue  # a wall time that a DST jump skips
                    instants.add(instant)
                    if instant > after and (best is None or instant < best):
                        best = instant
                # Later wall times are later instants, except around a fall-back, where a wall time
                # maps to two instants: only an unambiguous match ends the search.
                if best is not None and len(instants) == 1 and min(instants) >= best:
                    return best
        return best


def _number(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise ScheduleError(
            f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax'
        )
    return int(text)


def _field(expr: str, low: int, high: int, names: dict[str, int]) -> tuple[set[int], bool]:
    """The values one comma-separated field selects, and whether it was a bare star."""
    values: set[int] = set()
    star = False
    for part in expr.split(","):
        range_and_step = part.split("/")
        if len(range_and_step) > 2:
            raise ScheduleError(f"too many slashes: {part}")
        bounds = range_and_step[0].split("-")
        if len(bounds) > 2:
            raise ScheduleError(f"too many hyphens: {part}")
        part_star = bounds[0] in ("*", "?")
        if part_star:
            start, end = low, high
        else:
            start = _number(bounds[0], names)
            end = _number(bounds[1], names) if len(bounds) == 2 else start
        step = 1
        if len(range_and_step) == 2:
            step = _number(range_and_step[1], names)
            if len(bounds) == 1 and not part_star:
                end = high  # "N/step" means "N-max/step"
            if step > 1:
                part_star = False
        if start < low:
            raise ScheduleError(f"beginning of range ({start}) below minimum ({low}): {part}")
        if end > high:
            raise ScheduleError(f"end of range ({end}) above maximum ({high}): {part}")
        if start > end:
            raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {part}")
        if step == 0:
            raise ScheduleError(f"step of range should be a positive number: {part}")
        values.update(range(start, end + 1, step))
        star = star or part_star
    return values, star


def parse(schedule: str, zone: tzinfo = UTC) -> Schedule:
    """Parse a standard schedule to be evaluated in `zone`; TZ=/CRON_TZ= prefixes are refused as upstream."""
    schedule = schedule.strip()
    if "TZ=" in schedule:
        raise ScheduleError("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    if not schedule:
        raise ScheduleError("empty spec string")
    if schedule.startswith("@every "):
        every = schedule.removeprefix("@every ").strip()
        try:
            seconds = go_duration(every)
        except ValueError as exc:
            raise ScheduleError(f"failed to parse duration {every}: {exc}") from None
        return EverySchedule(max(int(seconds), 1))
    if schedule.startswith("@"):
        if schedule not in _DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {schedule}")
        schedule = _DESCRIPTORS[schedule]
    fields = schedule.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    parsed = [
        _field(text, low, high, names) for text, (low, high, names) in zip(fields, _BOUNDS, strict=True)
    ]
    return SpecSchedule(
        minutes=frozenset(parsed[0][0]),
        hours=frozenset(parsed[1][0]),
        days=frozenset(parsed[2][0]),
        months=frozenset(parsed[3][0]),
        weekdays=frozenset(parsed[4][0]),
        day_star=parsed[2][1] or parsed[4][1],
        zone=zone,
    )


#: upstream refuses to start anything when more start times than this were missed (and warns)
MAX_MISSED = 100


def missed_schedules(schedule: Schedule, earliest: datetime, now: datetime) -> tuple[datetime | None, int]:
    """The most recent firing in (earliest, now] and how many firings fell in that window.

    The count stops at MAX_MISSED + 1 ("too many"); the most recent time is then found by
    searching back from `now` instead of walking the whole window.
    """
    count = 0
    recent: datetime | None = None
    t = schedule.next(earliest)
    while t is not None and t <= now:
        count += 1
        recent = t
        if count > MAX_MISSED:
            return _latest_before(schedule, earliest, now), count
        t = schedule.next(t)
    return recent, count


def _latest_before(schedule: Schedule, earliest: datetime, now: datetime) -> datetime | None:
    window = timedelta(minutes=2)
    while True:
        start = max(earliest, now - window)
        recent = None
        t = schedule.next(start)
        while t is not None and t <= now:
            recent = t
            t = schedule.next(t)
        if recent is not None or start == earliest:
            return recent
        window *= 4

"""Five-field cron schedules (minute hour day-of-month month day-of-week), pure.

Fields take ``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, and lists of those;
day-of-week 0 and 7 are Sunday. As in cron, when both day fields are restricted a day matches
either. ``@hourly``, ``@daily``, ``@weekly``, ``@monthly`` are shorthands. Times are UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

SHORTHANDS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
}
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES = ("minute", "hour", "day of month", "month", "day of week")


def _field(text: str, low: int, high: int, name: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"{name}: bad step in {part!r}")
        if body == "*":
            start, end = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise ValueError(f"{name}: bad range {body!r}")
            start, end = int(a), int(b)
        elif body.isdigit():
            start = end = int(body)
            if step:
                end = high
        else:
            raise ValueError(f"{name}: {part!r} is not a number, range or *")
        if not (low <= start <= end <= high):
            raise ValueError(f"{name}: {part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step or 1))
    return frozenset(values)


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expr: str) -> Schedule:
        text = SHORTHANDS.get(expr.strip(), expr.strip())
        fields = text.split()
        if len(fields) != 5:
            raise ValueError(f"{expr!r}: a schedule has five fields (minute hour day month weekday)")
        parsed = [_field(f, lo, hi, n) for f, (lo, hi), n in zip(fields, _BOUNDS, _NAMES, strict=True)]
        weekdays = frozenset(d % 7 for d in parsed[4])
        return cls(*parsed[:4], weekdays, fields[2] == "*", fields[4] == "*")

    def _day(self, t: datetime) -> bool:
        if t.month not in self.months:
            return False
        dom, dow = t.day in self.days, (t.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def next_after(self, t: datetime) -> datetime:
        """The first matching minute strictly after ``t`` (within four years, else ValueError)."""
        t = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = t + timedelta(days=366 * 4)
        while t < limit:
            if not self._day(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
                continue
            if t.minute in self.minutes:
                return t
            t += timedelta(minutes=1)
        raise ValueError("the schedule never fires")

"""Time windows: bounds on a worker group's workers by weekday and time of day, in a time zone.

A schedule is written the same way in the RayCluster annotation ``queuepilot.io/schedule`` and in the
controller's ``scaling.cluster_queue_schedules`` (one per ClusterQueue); docs/autoscaling.md has the
reference.  Windows are separated by ``;`` or new lines, options are ``key=value`` parts::

    Mon-Fri 08:00-20:00 min=4 name=office; Mon-Fri 20:00-08:00 max=2; Sat,Sun 00:00-24:00 max=2; tz=Europe/Berlin

- a window is ``DAYS START-END`` and at least one of ``min=N`` / ``max=N`` (whole numbers 0-100000,
  min <= max), optionally ``name=NAME`` (lower-case letters, digits and ``-``, at most 32) and
  ``group=GROUP`` (one worker group; without it: every worker group of the RayCluster);
- ``DAYS``: ``Mon`` .. ``Sun`` (or the full names, any case), ranges ``Mon-Fri`` (also across the week's
  end: ``Fri-Mon``), lists ``Mon,Wed,Fri-Sun``, or ``*`` for every day;
- ``START-END``: ``HH:MM`` on the 24-hour clock, ``END`` up to ``24:00``; an end at or before the start
  crosses midnight (``20:00-08:00`` on ``Mon-Fri`` runs from Monday 20:00 to Tuesday 08:00, ...,
  Friday 20:00 to Saturday 08:00); equal times are refused (``00:00-24:00`` is the whole day);
- ``tz=ZONE``: an IANA time zone (``Europe/Berlin``, ``America/New_York``), at most once; default UTC.
  Times are wall-clock times there: across a daylight-saving change a window keeps its local times.

Validated hard, once, where the text is read (``parse_schedule`` raises ``ValueError`` naming the part
that is wrong): at most ``MAX_SCHEDULE_CHARS`` characters and ``MAX_WINDOWS`` windows; unknown keys,
repeated keys and repeated names are refused; **windows of one schedule must not overlap** (two
windows that bound the same group at the same minute of the week are refused, named both), so in
force at any time is at most one window per group of each schedule.

``Schedule.window_at(now)`` (``now`` in epoch seconds, passed in) is pure: the zone's rules are loaded
by ``parse_schedule``.  ``in_force(sources, now)`` gives the windows of several schedules in force at
``now`` (a RayCluster's own and its ClusterQueue's), and ``WindowBounds.of(windows, group)`` combines
those that bound one group: the largest ``min`` and the smallest ``max``; where a ``min`` is above a
``max`` the ``max`` wins (fewer GPUs held is the safe side on a shared cluster).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MAX_SCHEDULE_CHARS = 1024
MAX_WINDOWS = 16
MAX_WINDOW_WORKERS = 100_000
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
DAY_MINUTES = 1440
WEEK_MINUTES = 7 * DAY_MINUTES
UTC_ZONE = "UTC"

_TIME = re.compile(r"^(\d{2}):(\d{2})$", re.ASCII)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$", re.ASCII)
_GROUP = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", re.ASCII)
_ZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]{0,30}(/[A-Za-z0-9_+\-]{1,30}){0,2}$", re.ASCII)
_COUNT = re.compile(r"^\d{1,6}$", re.ASCII)
_WINDOW_KEYS = ("min", "max", "name", "group")


def _shown(text: str, limit: int = 48) -> str:
    """``repr`` of a piece of untrusted text, cut (it ends up in Events and logs)."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


@dataclass(frozen=True, slots=True)
class Window:
    """One window: on ``days`` (0 = Monday) from ``start`` to ``end`` (minutes after local midnight;
    ``end <= start`` crosses midnight), the bounds it sets, and optionally its name and worker group."""

    days: tuple[int, ...]
    start: int
    end: int
    min_workers: int | None = None
    max_workers: int | None = None
    name: str | None = None
    group: str | None = None
    # a window across days (``Fri 20:00-Mon 08:00``): the day it ends on (``days`` holds its first day);
    # None: the window repeats on each of ``days``
    end_day: int | None = None
    # derived (not inputs): the minutes of the week it covers, as sorted, disjoint [from, to) spans inside
    # [0, WEEK_MINUTES), the days it goes on from one into the next merged
    spans: tuple[tuple[int, int], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        length = self.end - self.start if self.end > self.start else self.end + DAY_MINUTES - self.start
        if self.end_day is not None:
            length = (self.end_day * DAY_MINUTES + self.end - self.days[0] * DAY_MINUTES - self.start) % WEEK_MINUTES
        spans: list[tuple[int, int]] = []
        for d in self.days:
            a = d * DAY_MINUTES + self.start
            b = a + length
            if b <= WEEK_MINUTES:
                spans.append((a, b))
            else:  # across the week's end (Sunday night into Monday)
                spans += [(a, WEEK_MINUTES), (0, b - WEEK_MINUTES)]
        merged: list[tuple[int, int]] = []
        for a, b in sorted(spans):  # one span where the window goes on from one day into the next
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        object.__setattr__(self, "spans", tuple(merged))

    @property
    def times(self) -> str:
        """``DAYS HH:MM-HH:MM`` (or ``DAY HH:MM-DAY HH:MM``) as the schedule's text writes it."""
        if self.end_day is not None:
            return f"{DAY_NAMES[self.days[0]]} {_hhmm(self.start)}-{DAY_NAMES[self.end_day]} {_hhmm(self.end)}"
        return f"{_days_text(self.days)} {_hhmm(self.start)}-{_hhmm(self.end)}"

    @property
    def label(self) -> str:
        """What Events call it: its name, else its days and times."""
        return self.name or self.times

    @property
    def bounds_text(self) -> str:
        parts = ([f"min={self.min_workers}"] if self.min_workers is not None else []) + (
            [f"max={self.max_workers}"] if self.max_workers is not None else [])
        return " ".join(parts)

    @property
    def text(self) -> str:
        """The window in the schedule's own syntax (``parse_schedule`` reads it back to the same window)."""
        extra = ([f"name={self.name}"] if self.name else []) + ([f"group={self.group}"] if self.group else [])
        return " ".join([self.times, self.bounds_text, *extra])

    def covers(self, minute_of_week: int) -> int | None:
        """Whether the window holds ``minute_of_week`` (0 = Monday 00:00 local): the minute of the week it
        ends at (past ``WEEK_MINUTES`` when it goes on past the week's end; ``-1``: it never ends), or None."""
        for a, b in self.spans:
            if a <= minute_of_week < b:
                if b == WEEK_MINUTES and self.spans[0][0] == 0:  # on into next week's first span
                    return -1 if self.spans[0][1] == WEEK_MINUTES else WEEK_MINUTES + self.spans[0][1]
                return b
        return None

    def bounds(self, group: str) -> bool:
        """Whether this window bounds the worker group ``group``."""
        return self.group is None or self.group == group


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule: its windows and the time zone their times are in."""

    windows: tuple[Window, ...]
    zone: str = UTC_ZONE
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo(UTC_ZONE), repr=False, compare=False)

    @property
    def text(self) -> str:
        """The schedule in its own syntax (canonical: what ``parse_schedule`` reads back to an equal one)."""
        return "; ".join([*(w.text for w in self.windows), *([f"tz={self.zone}"] if self.zone != UTC_ZONE else [])])

    def minute_of_week(self, now: float) -> int | None:
        """Local minutes since Monday 00:00 at ``now`` (epoch seconds); None for a time no clock shows."""
        try:
            t = datetime.fromtimestamp(now, self.tz)
        except (OverflowError, OSError, ValueError):
            return None
        return t.weekday() * DAY_MINUTES + t.hour * 60 + t.minute

    def window_at(self, now: float, group: str | None = None) -> tuple[Window, str] | None:
        """The window in force at ``now`` (for ``group``, or any group when None) and when it ends
        (``"Tue 08:00"``, local), or None.  Windows of one schedule never overlap for one group."""
        m = self.minute_of_week(now)
        if m is None:
            return None
        for w in self.windows:
            if group is not None and not w.bounds(group):
                continue
            end = w.covers(m)
            if end is not None:
                return w, _until(end)
        return None


@dataclass(frozen=True, slots=True)
class ActiveWindow:
    """A window in force now: which schedule it comes from (``source``: "RayCluster annotation",
    "ClusterQueue cq-a"), the schedule's zone and when the window ends (local time)."""

    window: Window
    source: str
    zone: str
    until: str

    def describe(self) -> str:
        """``window "night" (ClusterQueue cq-a: Mon-Fri 20:00-08:00 max=2, Europe/Berlin, until Tue 08:00)``."""
        w = self.window
        what = f"{w.times} {w.bounds_text}" + (f" group={w.group}" if w.group else "")
        return f'window "{w.label}" ({self.source}: {what}, {self.zone}, until {self.until})'


def in_force(sources: Sequence[tuple[str, Schedule]], now: float) -> tuple[ActiveWindow, ...]:
    """Every window of the ``(source, schedule)`` pairs in force at ``now`` (each schedule may have one
    per worker group it names, and one for all groups)."""
    out: list[ActiveWindow] = []
    for source, schedule in sources:
        m = schedule.minute_of_week(now)
        if m is None:
            continue
        for w in schedule.windows:
            end = w.covers(m)
            if end is not None:
                out.append(ActiveWindow(w, source, schedule.zone, _until(end)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WindowBounds:
    """The bounds the windows in force set on one worker group: the largest ``min`` and the smallest
    ``max`` (None: that side is not bounded), the windows that set them, and all windows in force."""

    min_workers: int | None
    max_workers: int | None
    min_by: ActiveWindow | None
    max_by: ActiveWindow | None
    windows: tuple[ActiveWindow, ...]
    conflict: bool = False  # a min above a max: the max won

    @classmethod
    def of(cls, active: Sequence[ActiveWindow], group: str) -> WindowBounds | None:
        mine = tuple(a for a in active if a.window.bounds(group))
        if not mine:
            return None
        lo = max((a for a in mine if a.window.min_workers is not None),
                 key=lambda a: a.window.min_workers or 0, default=None)
        hi = min((a for a in mine if a.window.max_workers is not None),
                 key=lambda a: a.window.max_workers or 0, default=None)
        lo_n = lo.window.min_workers if lo else None
        hi_n = hi.window.max_workers if hi else None
        conflict = lo_n is not None and hi_n is not None and lo_n > hi_n
        if conflict:
            lo_n = hi_n
        return cls(lo_n, hi_n, lo, hi, mine, conflict)

    def describe(self) -> str:
        """The windows in force, for a decision's message."""
        text = "; ".join(a.describe() for a in self.windows)
        if self.conflict and self.min_by and self.max_by:
            text += f" (its min {self.min_by.window.min_workers} is above the max {self.max_workers}: the max wins)"
        return text


# ---------------------------------------------------------------------------------------- parsing
def parse_schedule(text: object) -> Schedule:
    """A ``Schedule`` from its text; ``ValueError`` naming the part that is wrong (never another error)."""
    if not isinstance(text, str):
        raise ValueError(f"a schedule is text, not {type(text).__name__}")
    if len(text) > MAX_SCHEDULE_CHARS:
        raise ValueError(f"schedule longer than {MAX_SCHEDULE_CHARS} characters ({len(text)})")
    parts = [p.strip() for p in re.split(r"[;\n]", text) if p.strip()]
    zone: str | None = None
    windows: list[Window] = []
    for part in parts:
        key, eq, value = part.partition("=")
        if eq and " " not in key.strip() and key.strip().lower() in ("tz", "timezone"):
            if zone is not None:
                raise ValueError("tz= given twice")
            zone = value.strip()
            continue
        if len(windows) == MAX_WINDOWS:
            raise ValueError(f"more than {MAX_WINDOWS} windows")
        windows.append(_window(part))
    if not windows:
        raise ValueError("no window (e.g. 'Mon-Fri 20:00-08:00 max=2; tz=Europe/Berlin')")
    names = [w.name for w in windows if w.name]
    if len(names) != len(set(names)):
        raise ValueError(f"window name used twice: {sorted({n for n in names if names.count(n) > 1})[0]}")
    _check_overlaps(windows)
    zone = zone or UTC_ZONE
    return Schedule(tuple(windows), zone, _zone(zone))


def _zone(name: str) -> ZoneInfo:
    if not _ZONE.match(name):
        raise ValueError(f"not a time zone name (use an IANA name such as Europe/Berlin): {_shown(name)}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {_shown(name)} (use an IANA name such as Europe/Berlin)") from None


def _window(part: str) -> Window:
    tokens = part.split()
    if len(tokens) < 3:
        raise ValueError(f"a window is 'DAYS HH:MM-HH:MM min=N|max=N' or 'DAY HH:MM-DAY HH:MM ...', "
                         f"got {_shown(part)}")
    days = _days(tokens[0])
    start, _, end = tokens[1].partition("-")
    t0 = _minutes(start, tokens[1], end_of_day=False)
    end_day: int | None = None
    rest = tokens[2:]
    if end[:1].isalpha():  # DAY HH:MM-DAY HH:MM: one window across days
        if len(days) != 1 or not rest:
            raise ValueError(f"a window across days is 'DAY HH:MM-DAY HH:MM', got {_shown(part)}")
        end_day, end, rest = _day(end), rest[0], rest[1:]
        whole = f"{tokens[1]} {end}"
    else:
        whole = tokens[1]
    t1 = _minutes(end, whole, end_of_day=end_day is None)
    if t0 == t1 and end_day in (None, days[0]):
        raise ValueError(f"window {_shown(tokens[0] + ' ' + whole)} is empty (00:00-24:00 is the whole day)")
    options: dict[str, str] = {}
    for tok in rest:
        k, eq, v = tok.partition("=")
        k = k.lower()
        if not eq or k not in _WINDOW_KEYS:
            raise ValueError(f"unknown window option {_shown(tok)} (known: {', '.join(_WINDOW_KEYS)}, as key=value)")
        if k in options:
            raise ValueError(f"{k}= given twice in window {_shown(part)}")
        options[k] = v
    lo = _count(options["min"], "min") if "min" in options else None
    hi = _count(options["max"], "max") if "max" in options else None
    if lo is None and hi is None:
        raise ValueError(f"window {_shown(part)} sets neither min= nor max=")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"window {_shown(part)}: min={lo} is above max={hi}")
    name = options.get("name")
    if name is not None and not _NAME.match(name):
        raise ValueError(f"window name {_shown(name)}: lower-case letters, digits and '-', at most 32")
    group = options.get("group")
    if group is not None and not _GROUP.match(group):
        raise ValueError(f"not a worker group name: {_shown(group)}")
    return Window(days, t0, t1, lo, hi, name, group, end_day)


def _day(text: str) -> int:
    t = text.lower()
    for i, (short, full) in enumerate(zip(DAY_NAMES, _FULL_DAY_NAMES, strict=True)):
        if t in (short.lower(), full):
            return i
    raise ValueError(f"not a day (use Mon..Sun, ranges Mon-Fri, lists Sat,Sun or *): {_shown(text)}")


def _days(text: str) -> tuple[int, ...]:
    if text == "*":
        return tuple(range(7))
    days: set[int] = set()
    for item in text.split(","):
        first, dash, last = item.partition("-")
        a = _day(first)
        b = _day(last) if dash else a
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return tuple(sorted(days))


def _minutes(text: str, whole: str, *, end_of_day: bool) -> int:
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"times are HH:MM-HH:MM on the 24-hour clock, got {_shown(whole)}")
    h, mi = int(m.group(1)), int(m.group(2))
    if (h, mi) == (24, 0) and end_of_day:
        return DAY_MINUTES
    if h > 23 or mi > 59:
        raise ValueError(f"no such time of day: {_shown(text)}" + (" (24:00 only as an end)" if h == 24 else ""))
    return h * 60 + mi


def _count(text: str, key: str) -> int:
    if not _COUNT.match(text) or int(text) > MAX_WINDOW_WORKERS:
        raise ValueError(f"{key}= must be a whole number 0-{MAX_WINDOW_WORKERS}, got {_shown(text)}")
    return int(text)


def _check_overlaps(windows: Sequence[Window]) -> None:
    for i, a in enumerate(windows):
        for b in windows[i + 1:]:
            if a.group is not None and b.group is not None and a.group != b.group:
                continue  # they bound different groups
            for x0, x1 in a.spans:
                for y0, y1 in b.spans:
                    if x0 < y1 and y0 < x1:
                        raise ValueError(f"windows overlap at {_until(max(x0, y0))}: {_shown(a.times)} and "
                                         f"{_shown(b.times)} (windows of one schedule must not overlap)")


# -------------------------------------------------------------------------------------- rendering
def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _until(minute_of_week: int) -> str:
    if minute_of_week < 0:
        return "never (all week)"
    m = minute_of_week % WEEK_MINUTES
    return f"{DAY_NAMES[m // DAY_MINUTES]} {_hhmm(m % DAY_MINUTES)}"


def _days_text(days: Sequence[int]) -> str:
    """``Mon-Fri``, ``Sat,Sun``, ``Mon,Wed-Fri``; ``*`` for every day (runs wrap past Sunday only as
    separate items, so the text reads back to the same days)."""
    if len(days) == 7:
        return "*"
    runs: list[list[int]] = []
    for d in sorted(days):
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ",".join(DAY_NAMES[r[0]] if len(r) == 1 else
                    (f"{DAY_NAMES[r[0]]},{DAY_NAMES[r[1]]}" if len(r) == 2 else f"{DAY_NAMES[r[0]]}-{DAY_NAMES[r[-1]]}")
                    for r in runs)

"""Typed values of the API (the schemas of ``openapi.yaml``) and their pandas-friendly forms.

Every ``from_json`` takes the decoded JSON object, checks the fields the spec requires and
ignores fields it does not know (a newer agent may add some). Times stay Unix nanoseconds
(``t_ns``, ``start_ns``) as the agent sends them; the ``time`` properties and the ``time``
column of the flat dicts are timezone-aware ``datetime`` in UTC (microsecond precision;
``to_dataframe`` keeps the nanoseconds).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence

from .errors import ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    import pandas  # type: ignore

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

__all__ = [
    "PathMetric",
    "Record",
    "Point",
    "ScaleAnswer",
    "Counters",
    "Schedule",
    "Passive",
    "Event",
    "Lagged",
    "Query",
    "QueryEvent",
    "ns_to_datetime",
    "datetime_to_ns",
    "records_to_dicts",
    "records_to_dataframe",
]


def ns_to_datetime(ns: int) -> _dt.datetime:
    """Unix nanoseconds to an aware UTC ``datetime`` (truncated to microseconds)."""
    return _EPOCH + _dt.timedelta(microseconds=ns // 1000)


def datetime_to_ns(t: _dt.datetime) -> int:
    """An aware ``datetime`` (a naive one is taken as local time, as ``datetime.timestamp``
    does) to Unix nanoseconds, exactly."""
    if t.tzinfo is None:
        t = t.astimezone()
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


# -- field access with clear errors --------------------------------------------------------


def _obj(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(v).__name__}")
    return v


def _get(d: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return d[key]
    except KeyError:
        raise ProtocolError(f"{what}: field {key!r} missing in {dict(d)!r}") from None


def _int(d: Mapping[str, Any], key: str, what: str, default: Optional[int] = None) -> int:
    v = d.get(key, default) if default is not None else _get(d, key, what)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ProtocolError(f"{what}: field {key!r} is not an integer: {v!r}")


def _opt_int(d: Mapping[str, Any], key: str, what: str) -> Optional[int]:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ProtocolError(f"{what}: field {key!r} is not an integer: {v!r}")


def _float(d: Mapping[str, Any], key: str, what: str) -> float:
    v = _get(d, key, what)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"{what}: field {key!r} is not a number: {v!r}")
    return float(v)


def _opt_float(d: Mapping[str, Any], key: str, what: str) -> Optional[float]:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"{what}: field {key!r} is not a number: {v!r}")
    return float(v)


def _str(d: Mapping[str, Any], key: str, what: str) -> str:
    v = _get(d, key, what)
    if not isinstance(v, str):
        raise ProtocolError(f"{what}: field {key!r} is not a string: {v!r}")
    return v


def _opt_str(d: Mapping[str, Any], key: str, what: str) -> Optional[str]:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ProtocolError(f"{what}: field {key!r} is not a string: {v!r}")
    return v


def _bool(d: Mapping[str, Any], key: str, what: str) -> bool:
    v = _get(d, key, what)
    if not isinstance(v, bool):
        raise ProtocolError(f"{what}: field {key!r} is not a boolean: {v!r}")
    return v


def _list(v: Any, what: str) -> List[Any]:
    if not isinstance(v, list):
        raise ProtocolError(f"{what}: expected a JSON array, got {type(v).__name__}")
    return v


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "to_dataframe() needs pandas, which mgrp_client does not install by itself: "
            "pip install 'mgrp-client[pandas]' (or pip install pandas)"
        ) from e
    return pandas


def _frame(rows: List[Dict[str, Any]], columns: Sequence[str], ns_column: str) -> "pandas.DataFrame":
    pd = _pandas()
    df = pd.DataFrame(rows, columns=list(columns))
    # Exact nanoseconds, and a proper datetime64[ns, UTC] column even when empty.
    df["time"] = pd.to_datetime(df[ns_column].astype("int64"), unit="ns", utc=True)
    return df


# -- the schemas ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PathMetric:
    """One entry of ``/v1/paths``: a path (``SRC->DST``) and a metric it has estimates of."""

    path: str
    metric: str

    @classmethod
    def from_json(cls, v: Any) -> "PathMetric":
        d = _obj(v, "path entry")
        return cls(path=_str(d, "path", "path entry"), metric=_str(d, "metric", "path entry"))


RECORD_COLUMNS = (
    "time",
    "path",
    "metric",
    "t_ns",
    "value",
    "low",
    "high",
    "method",
    "source",
    "probe_bytes",
    "trains",
    "confidence",
    "elapsed_s",
    "final",
    "timescale_ms",
)


@dataclass(frozen=True)
class Record:
    """One estimate with its quality tuple. Units: ``avail_bw``/``capacity`` bit/s, ``rtt``
    seconds, ``loss`` a fraction (0..1). ``low``..``high`` is the range; ``final`` is False
    for a rough early estimate that a later one of the same measurement refines.
    ``timescale_ms`` is the time scale the value holds over (the span its streams covered),
    None for methods that do not state one."""

    path: str
    metric: str
    t_ns: int
    value: float
    low: float
    high: float
    method: str
    source: str
    probe_bytes: int
    trains: int
    confidence: float
    elapsed_s: float
    final: bool
    timescale_ms: Optional[float] = None

    @classmethod
    def from_json(cls, v: Any) -> "Record":
        w = "record"
        d = _obj(v, w)
        return cls(
            path=_str(d, "path", w),
            metric=_str(d, "metric", w),
            t_ns=_int(d, "t_ns", w),
            value=_float(d, "value", w),
            low=_float(d, "low", w),
            high=_float(d, "high", w),
            method=_str(d, "method", w),
            source=_str(d, "source", w),
            probe_bytes=_int(d, "probe_bytes", w),
            trains=_int(d, "trains", w),
            confidence=_float(d, "confidence", w),
            elapsed_s=_float(d, "elapsed_s", w),
            final=_bool(d, "final", w),
            timescale_ms=_opt_float(d, "timescale_ms", w),
        )

    @property
    def time(self) -> _dt.datetime:
        """When the estimate's measurement ended (UTC)."""
        return ns_to_datetime(self.t_ns)

    def age(self, now: Optional[_dt.datetime] = None) -> _dt.timedelta:
        """How old the estimate is (now, or at ``now``)."""
        return (now or _dt.datetime.now(_dt.timezone.utc)) - self.time

    def to_dict(self) -> Dict[str, Any]:
        """A flat dict, ``time`` first: one row of a DataFrame."""
        return {
            "time": self.time,
            "path": self.path,
            "metric": self.metric,
            "t_ns": self.t_ns,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "method": self.method,
            "source": self.source,
            "probe_bytes": self.probe_bytes,
            "trains": self.trains,
            "confidence": self.confidence,
            "elapsed_s": self.elapsed_s,
            "final": self.final,
            "timescale_ms": self.timescale_ms,
        }


def records_to_dicts(records: Iterable[Record]) -> List[Dict[str, Any]]:
    """Records as flat dicts with a ``time`` column: ``pandas.DataFrame(records_to_dicts(rs))``."""
    return [r.to_dict() for r in records]


def records_to_dataframe(records: Iterable[Record]) -> "pandas.DataFrame":
    """Records as a DataFrame (columns ``RECORD_COLUMNS``; ``time`` is datetime64[ns, UTC]).
    Needs pandas (``pip install 'mgrp-client[pandas]'``)."""
    return _frame(records_to_dicts(records), RECORD_COLUMNS, "t_ns")


POINT_COLUMNS = ("time", "start_ns", "n", "mean", "min", "max", "last")


@dataclass(frozen=True)
class Point:
    """One step of a history: ``n`` estimates starting at ``start_ns``, their mean, min, max
    and the newest (``last``)."""

    start_ns: int
    n: int
    mean: float
    min: float
    max: float
    last: float

    @classmethod
    def from_json(cls, v: Any) -> "Point":
        w = "point"
        d = _obj(v, w)
        return cls(
            start_ns=_int(d, "start_ns", w),
            n=_int(d, "n", w),
            mean=_float(d, "mean", w),
            min=_float(d, "min", w),
            max=_float(d, "max", w),
            last=_float(d, "last", w),
        )

    @property
    def time(self) -> _dt.datetime:
        """Start of the step (UTC)."""
        return ns_to_datetime(self.start_ns)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "time": self.time,
            "start_ns": self.start_ns,
            "n": self.n,
            "mean": self.mean,
            "min": self.min,
            "max": self.max,
            "last": self.last,
        }


@dataclass(frozen=True)
class ScaleAnswer:
    """A metric's history at a time scale: steps with at least one estimate, oldest first.
    ``source`` is ``agg_60s``, ``agg_3600s`` or ``raw``; ``complete`` is False when raw
    estimates the answer needs were removed by retention."""

    points: List[Point]
    source: str
    complete: bool

    @classmethod
    def from_json(cls, v: Any) -> "ScaleAnswer":
        w = "history"
        d = _obj(v, w)
        return cls(
            points=[Point.from_json(p) for p in _list(_get(d, "points", w), "history points")],
            source=_str(d, "source", w),
            complete=_bool(d, "complete", w),
        )

    def __len__(self) -> int:
        return len(self.points)

    def to_records(self) -> List[Dict[str, Any]]:
        """The points as flat dicts with a ``time`` column: ``pandas.DataFrame(a.to_records())``."""
        return [p.to_dict() for p in self.points]

    def to_dataframe(self) -> "pandas.DataFrame":
        """The points as a DataFrame (columns ``POINT_COLUMNS``; ``time`` is
        datetime64[ns, UTC]). Needs pandas (``pip install 'mgrp-client[pandas]'``)."""
        return _frame(self.to_records(), POINT_COLUMNS, "start_ns")


@dataclass(frozen=True)
class Counters:
    """A schedule's counters since the agent started."""

    measurements: int = 0
    estimates_stored: int = 0
    skipped_for_budget: int = 0
    cut_by_budget: int = 0
    errors: int = 0
    probe_bytes: int = 0
    # Rounds that reached their deadline before the estimate was final (nothing stored).
    timed_out: int = 0

    @classmethod
    def from_json(cls, v: Any) -> "Counters":
        w = "counters"
        d = _obj(v, w)
        return cls(
            measurements=_int(d, "measurements", w, 0),
            estimates_stored=_int(d, "estimates_stored", w, 0),
            skipped_for_budget=_int(d, "skipped_for_budget", w, 0),
            cut_by_budget=_int(d, "cut_by_budget", w, 0),
            errors=_int(d, "errors", w, 0),
            probe_bytes=_int(d, "probe_bytes", w, 0),
            timed_out=_int(d, "timed_out", w, 0),
        )

    def to_dict(self) -> Dict[str, int]:
        return {
            "measurements": self.measurements,
            "estimates_stored": self.estimates_stored,
            "skipped_for_budget": self.skipped_for_budget,
            "cut_by_budget": self.cut_by_budget,
            "errors": self.errors,
            "probe_bytes": self.probe_bytes,
            "timed_out": self.timed_out,
        }


@dataclass(frozen=True)
class Schedule:
    """A path this agent keeps fresh: its peer (``IP:PORT``), its name ``SRC->DST`` once
    connected (else None), method, period, byte budget, last measurement and error.

    ``budget_bytes_per_min`` is the budget in force: the configured one or, when
    ``budget_configured`` is False, the default derived from the method's cost at the path's
    capacity. ``budget_exhausted`` is True while the last round gave no fresh estimate because
    the budget ran out (``last_error`` then says so). Agents that predate these fields read as
    configured and not exhausted."""

    peer: str
    path: Optional[str]
    method: str
    every_s: float
    budget_bytes_per_min: int
    last_ns: Optional[int]
    last_error: Optional[str]
    counters: Counters = field(default_factory=Counters)
    budget_configured: bool = True
    budget_exhausted: bool = False

    @classmethod
    def from_json(cls, v: Any) -> "Schedule":
        w = "schedule"
        d = _obj(v, w)
        return cls(
            peer=_str(d, "peer", w),
            path=_opt_str(d, "path", w),
            method=_str(d, "method", w),
            every_s=_float(d, "every_s", w),
            budget_bytes_per_min=_int(d, "budget_bytes_per_min", w),
            last_ns=_opt_int(d, "last_ns", w),
            last_error=_opt_str(d, "last_error", w),
            counters=Counters.from_json(_get(d, "counters", w)),
            budget_configured=_bool(d, "budget_configured", w) if "budget_configured" in d else True,
            budget_exhausted=_bool(d, "budget_exhausted", w) if "budget_exhausted" in d else False,
        )

    @property
    def last_time(self) -> Optional[_dt.datetime]:
        """End of the last measurement (UTC), or None before the first."""
        return None if self.last_ns is None else ns_to_datetime(self.last_ns)


@dataclass(frozen=True)
class Passive:
    """A passive source (Wren on an interface's TCP traffic) and its counters."""

    iface: str
    flow: Optional[str]
    segments: int
    estimates: int
    capture_dropped: int
    errors: int
    last_error: Optional[str]
    # Why there are (or are not) estimates: trains judged, rising (an upper bound only), lower
    # bounds (estimates come only from these), runs too short or uneven to be trains.
    trains: int = 0
    trains_rising: int = 0
    trains_lower_bound: int = 0
    short_runs: int = 0

    @classmethod
    def from_json(cls, v: Any) -> "Passive":
        w = "passive source"
        d = _obj(v, w)
        return cls(
            iface=_str(d, "iface", w),
            flow=_opt_str(d, "flow", w),
            segments=_int(d, "segments", w),
            estimates=_int(d, "estimates", w),
            capture_dropped=_int(d, "capture_dropped", w),
            errors=_int(d, "errors", w),
            last_error=_opt_str(d, "last_error", w),
            trains=_int(d, "trains", w, 0),
            trains_rising=_int(d, "trains_rising", w, 0),
            trains_lower_bound=_int(d, "trains_lower_bound", w, 0),
            short_runs=_int(d, "short_runs", w, 0),
        )


EVENT_KINDS = ("estimate", "below", "above", "rise", "fall")


@dataclass(frozen=True)
class Event:
    """One event of a subscription: ``kind`` is ``estimate`` (every new estimate, when no
    condition was given), ``below``/``above`` (crossing the ``below`` threshold; ``threshold``
    is set), or ``rise``/``fall`` (``reference`` is the value it is measured from and
    ``change_pct`` the signed change in %, None when the reference was 0)."""

    kind: str
    path: str
    metric: str
    value: float
    threshold: Optional[float]
    reference: Optional[float]
    change_pct: Optional[float]
    record: Record

    #: False: this is an event, not a :class:`Lagged` notice.
    is_lagged = False

    @classmethod
    def from_json(cls, v: Any, kind: Optional[str] = None) -> "Event":
        w = "event"
        d = _obj(v, w)
        k = d.get("kind", kind)
        if not isinstance(k, str):
            raise ProtocolError(f"event: field 'kind' missing or not a string in {dict(d)!r}")
        return cls(
            kind=k,
            path=_str(d, "path", w),
            metric=_str(d, "metric", w),
            value=_float(d, "value", w),
            threshold=_opt_float(d, "threshold", w),
            reference=_opt_float(d, "reference", w),
            change_pct=_opt_float(d, "change_pct", w),
            record=Record.from_json(_get(d, "record", w)),
        )

    @property
    def time(self) -> _dt.datetime:
        """Time of the estimate that raised the event (UTC)."""
        return self.record.time

    def to_dict(self) -> Dict[str, Any]:
        """A flat dict: the event's fields, then the record's quality fields."""
        r = self.record
        return {
            "time": r.time,
            "kind": self.kind,
            "path": self.path,
            "metric": self.metric,
            "value": self.value,
            "threshold": self.threshold,
            "reference": self.reference,
            "change_pct": self.change_pct,
            "t_ns": r.t_ns,
            "low": r.low,
            "high": r.high,
            "method": r.method,
            "confidence": r.confidence,
            "final": r.final,
        }


@dataclass(frozen=True)
class Lagged:
    """Not an event: the subscriber fell behind and the agent dropped ``missed`` estimates
    (so an edge such as ``below`` may have been missed; ask ``estimate()`` for where things
    stand). ``missed`` is None if the agent did not say how many."""

    missed: Optional[int]
    kind: str = "lagged"

    #: True: this is a lag notice, not an :class:`Event`.
    is_lagged = True

    @classmethod
    def from_json(cls, v: Any) -> "Lagged":
        if isinstance(v, Mapping):
            return cls(missed=_opt_int(v, "missed", "lagged"))
        if isinstance(v, int) and not isinstance(v, bool):
            return cls(missed=v)
        return cls(missed=None)


@dataclass(frozen=True)
class QueryEvent:
    """A notification of an event-driven query: its condition started holding (``below``,
    ``exceeds``; ``holds`` True) or stopped (``above``, ``within``; ``holds`` False)."""

    query: str
    condition: str
    holds: bool
    path: str
    metric: str
    value: float
    threshold: Optional[float]
    record: Record
    kind: str = "query"

    @classmethod
    def from_json(cls, v: Any) -> "QueryEvent":
        w = "query event"
        d = _obj(v, w)
        return cls(
            query=_str(d, "query", w),
            condition=_str(d, "condition", w),
            holds=_bool(d, "holds", w),
            path=_str(d, "path", w),
            metric=_str(d, "metric", w),
            value=_float(d, "value", w),
            threshold=_opt_float(d, "threshold", w),
            record=Record.from_json(_get(d, "record", w)),
        )


@dataclass(frozen=True)
class Query:
    """A client-created query (``/v1/queries``): what was asked (peer, mode ``once``,
    ``periodic`` or ``event``, method, metric, period, budget in probe bytes a minute, the
    ``below``/``exceeds`` condition), and how it fares: ``status`` (``running``, ``done``,
    ``failing`` with ``last_error``, ``budget_exhausted``, ``stopped``), counters, the
    notifications sent and the newest ``result`` of its metric."""

    id: str
    owner: str
    created_ns: int
    peer: str
    mode: str
    method: str
    metric: str
    every_s: float
    budget_bytes_per_min: int
    below: Optional[float]
    exceeds: Optional[float]
    status: str
    path: Optional[str]
    last_ns: Optional[int]
    last_error: Optional[str]
    budget_exhausted: bool
    counters: Counters
    events: int
    last_event: Optional[QueryEvent]
    result: Optional[Record]

    @classmethod
    def from_json(cls, v: Any) -> "Query":
        w = "query"
        d = _obj(v, w)
        le = d.get("last_event")
        res = d.get("result")
        return cls(
            id=_str(d, "id", w),
            owner=_str(d, "owner", w),
            created_ns=_int(d, "created_ns", w),
            peer=_str(d, "peer", w),
            mode=_str(d, "mode", w),
            method=_str(d, "method", w),
            metric=_str(d, "metric", w),
            every_s=_float(d, "every_s", w),
            budget_bytes_per_min=_int(d, "budget_bytes_per_min", w),
            below=_opt_float(d, "below", w),
            exceeds=_opt_float(d, "exceeds", w),
            status=_str(d, "status", w),
            path=_opt_str(d, "path", w),
            last_ns=_opt_int(d, "last_ns", w),
            last_error=_opt_str(d, "last_error", w),
            budget_exhausted=_bool(d, "budget_exhausted", w),
            counters=Counters.from_json(_get(d, "counters", w)),
            events=_int(d, "events", w, 0),
            last_event=None if le is None else QueryEvent.from_json(le),
            result=None if res is None else Record.from_json(res),
        )

"""Decoding the API's JSON into dataclasses and flattening it for pandas, offline."""

from __future__ import annotations

import datetime as dt

import pytest

from mgrp_client import (
    Counters,
    Event,
    Lagged,
    ProtocolError,
    Record,
    ScaleAnswer,
    Schedule,
    datetime_to_ns,
    ns_to_datetime,
    records_to_dataframe,
    records_to_dicts,
)
from mgrp_client.models import POINT_COLUMNS, RECORD_COLUMNS

UTC = dt.timezone.utc

REC = {
    "path": "198.18.1.2->198.18.3.2",
    "metric": "avail_bw",
    "t_ns": 1_795_285_484_944_440_317,
    "value": 19890588.176422033,
    "low": 19574864.554574065,
    "high": 20206311.798270002,
    "method": "auto:slops",
    "source": "active",
    "probe_bytes": 1086850,
    "trains": 25,
    "confidence": 1.0,
    "elapsed_s": 0.581514121,
    "final": True,
}


def rec(**kw: object) -> dict:
    d = dict(REC)
    d.update(kw)
    return d


def test_record_from_json_and_time():
    r = Record.from_json(rec(extra_field="ignored"))
    assert r.value == REC["value"] and r.final is True and r.trains == 25
    assert r.time == dt.datetime(2026, 11, 21, 18, 24, 44, 944440, tzinfo=UTC)
    assert r.time.tzinfo is UTC


def test_record_time_scale_is_optional():
    assert Record.from_json(rec()).timescale_ms is None
    r = Record.from_json(rec(timescale_ms=912))
    assert r.timescale_ms == 912.0 and r.to_dict()["timescale_ms"] == 912.0
    with pytest.raises(ProtocolError, match="timescale_ms"):
        Record.from_json(rec(timescale_ms="1s"))


def test_record_integers_where_floats_are_expected():
    r = Record.from_json(rec(value=0, low=0, high=1))
    assert isinstance(r.value, float) and r.high == 1.0


@pytest.mark.parametrize(
    "bad, why",
    [
        ({k: v for k, v in REC.items() if k != "value"}, "'value' missing"),
        (rec(t_ns="1"), "'t_ns' is not an integer"),
        (rec(value="fast"), "'value' is not a number"),
        (rec(final=1), "'final' is not a boolean"),
        (rec(trains=True), "'trains' is not an integer"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_record_malformed(bad: object, why: str):
    with pytest.raises(ProtocolError, match=why):
        Record.from_json(bad)


def test_time_conversions_round_trip():
    t = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert ns_to_datetime(datetime_to_ns(t)) == t
    assert datetime_to_ns(t) == 1_767_323_045_678_901_000
    other = t.astimezone(dt.timezone(dt.timedelta(hours=5)))
    assert datetime_to_ns(other) == datetime_to_ns(t)


def test_records_to_dicts_flat_with_time_first():
    rows = records_to_dicts([Record.from_json(REC), Record.from_json(rec(t_ns=REC["t_ns"] + 10**9, value=1.0))])
    assert list(rows[0]) == list(RECORD_COLUMNS)
    assert rows[1]["time"] - rows[0]["time"] == dt.timedelta(seconds=1)
    assert rows[1]["value"] == 1.0


def test_scale_answer_and_points():
    a = ScaleAnswer.from_json(
        {
            "points": [
                {"start_ns": 1_795_285_505_000_000_000, "n": 2, "mean": 1.5, "min": 1, "max": 2, "last": 2},
                {"start_ns": 1_795_285_506_000_000_000, "n": 1, "mean": 3.0, "min": 3.0, "max": 3.0, "last": 3.0},
            ],
            "source": "raw",
            "complete": True,
        }
    )
    assert len(a) == 2 and a.source == "raw" and a.complete
    rows = a.to_records()
    assert list(rows[0]) == list(POINT_COLUMNS)
    assert rows[0]["time"] == dt.datetime(2026, 11, 21, 18, 25, 5, tzinfo=UTC)
    assert rows[1]["mean"] == 3.0


def test_dataframes():
    pd = pytest.importorskip("pandas", reason="pandas comes with the [test] extra")
    rs = [Record.from_json(REC), Record.from_json(rec(t_ns=REC["t_ns"] + 1))]
    # The flat dicts go straight into pandas...
    df = pd.DataFrame(records_to_dicts(rs))
    assert list(df.columns) == list(RECORD_COLUMNS)
    assert str(df["time"].dt.tz) == "UTC"
    # ... and to_dataframe keeps the nanoseconds.
    df = records_to_dataframe(rs)
    assert df["time"].iloc[1].value == REC["t_ns"] + 1
    assert df["value"].dtype == "float64" and df["final"].dtype == bool
    a = ScaleAnswer.from_json(
        {"points": [{"start_ns": 60_000_000_000, "n": 1, "mean": 1, "min": 1, "max": 1, "last": 1}], "source": "agg_60s", "complete": False}
    )
    pdf = a.to_dataframe()
    assert list(pdf.columns) == list(POINT_COLUMNS)
    assert pdf["time"].iloc[0] == pd.Timestamp("1970-01-01 00:01:00", tz="UTC")
    assert pd.DataFrame(a.to_records())["n"].tolist() == [1]


def test_empty_dataframes_still_have_columns():
    pytest.importorskip("pandas", reason="pandas comes with the [test] extra")
    df = records_to_dataframe([])
    assert list(df.columns) == list(RECORD_COLUMNS) and len(df) == 0
    assert str(df["time"].dtype) == "datetime64[ns, UTC]"
    df = ScaleAnswer(points=[], source="raw", complete=True).to_dataframe()
    assert list(df.columns) == list(POINT_COLUMNS)


def test_schedule_with_nulls_and_counters():
    s = Schedule.from_json(
        {
            "peer": "198.18.3.2:7240",
            "path": None,
            "method": "auto",
            "every_s": 1.0,
            "budget_bytes_per_min": 52428800,
            "last_ns": None,
            "last_error": "connection refused",
            "counters": {"measurements": 5, "errors": 1},
        }
    )
    assert s.path is None and s.last_time is None and s.last_error == "connection refused"
    assert s.counters == Counters(measurements=5, errors=1)
    assert s.counters.to_dict()["probe_bytes"] == 0
    assert s.budget_configured and not s.budget_exhausted, "an older agent's schedule"


def test_schedule_cut_by_its_budget():
    s = Schedule.from_json(
        {
            "peer": "198.18.3.2:7240",
            "path": "198.18.1.2->198.18.3.2",
            "method": "auto",
            "every_s": 10.0,
            "budget_bytes_per_min": 3334400,
            "budget_configured": False,
            "budget_exhausted": True,
            "last_ns": 1795000000000000000,
            "last_error": "probe byte budget exhausted: measurement skipped",
            "counters": {"skipped_for_budget": 2},
        }
    )
    assert not s.budget_configured and s.budget_exhausted
    assert s.counters.skipped_for_budget == 2


def test_event_and_lagged():
    e = Event.from_json(
        {
            "kind": "fall",
            "path": REC["path"],
            "metric": "avail_bw",
            "value": 6e6,
            "threshold": None,
            "reference": 2e7,
            "change_pct": -70.0,
            "record": rec(value=6e6),
        }
    )
    assert e.kind == "fall" and e.reference == 2e7 and e.threshold is None and not e.is_lagged
    assert e.record.value == 6e6 and e.time == e.record.time
    assert e.to_dict()["change_pct"] == -70.0
    lg = Lagged.from_json({"missed": 12})
    assert lg.is_lagged and lg.kind == "lagged" and lg.missed == 12
    assert Lagged.from_json(None).missed is None
    with pytest.raises(ProtocolError, match="record"):
        Event.from_json({"kind": "below", "path": "a->b", "metric": "avail_bw", "value": 1})

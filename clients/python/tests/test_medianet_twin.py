"""The Python twin of MediaNet's global scheduler (examples/medianet_levels.py): the same test
vectors as examples/medianet/src/global.rs, and a run against a scripted agent on loopback."""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import sys
from pathlib import Path


from mgrp_client import Client, Record

from test_client_offline import Req, ev_json, server  # noqa: F401  (the fixture)
from test_models import rec

_spec = importlib.util.spec_from_file_location(
    "medianet_levels", Path(__file__).resolve().parent.parent / "examples" / "medianet_levels.py"
)
ml = importlib.util.module_from_spec(_spec)
sys.modules["medianet_levels"] = ml
_spec.loader.exec_module(ml)
L = ml.Level


def keep_up(g, at):
    for i, l in enumerate(list(g.levels)):
        g.handle_report(at, ml.Report(i, l.rate_bps))


def test_choose_maximises_utility_under_the_bound():
    cur = [L.LOW] * 3
    assert ml.choose(cur, 3_480_000.0) == [L.HIGH] * 3
    assert ml.choose(cur, 100_000.0) == [L.LOW] * 3, "the minimum"
    two = ml.choose(cur, 2_000_000.0)
    assert two.count(L.HIGH) == 1 and two.count(L.LOW) == 2
    for k in range(81):
        bound = 500_000.0 + k * 50_000.0
        c = ml.choose(cur, bound)
        u = sum(l.utility for l in c)
        assert sum(l.rate_bps for l in c) <= bound or c == [L.LOW] * 3
        for o in itertools.product(list(L), repeat=3):
            assert sum(l.rate_bps for l in o) > bound or sum(l.utility for l in o) <= u + 1e-9


def test_ties_keep_the_current_levels():
    # 1.6 Mbit/s bound: one high and two low, whichever stream is high now stays high.
    for cur in ([L.HIGH, L.LOW, L.LOW], [L.LOW, L.LOW, L.HIGH]):
        assert ml.choose(cur, 1_600_000.0) == cur


def test_upgrades_within_one_estimate_when_the_ceiling_rises():
    g = ml.GlobalScheduler()
    keep_up(g, 1.0)
    assert g.levels == [L.LOW] * 3, "no evidence of more: no change"
    assert g.handle_estimate(1.0, 5e6, True)
    assert g.levels == [L.HIGH] * 3
    assert abs(g.ceiling_bps - (5e6 + 648_000.0)) < 1.0


def test_a_failure_lowers_the_ceiling_and_a_low_estimate_cannot_go_under_the_floor():
    g = ml.GlobalScheduler()
    g.handle_estimate(0.0, 10e6, False)
    assert g.levels == [L.HIGH] * 3
    g.handle_report(1.0, ml.Report(0, 600_000.0, dropped=4))
    g.handle_report(1.0, ml.Report(1, 1_160_000.0))
    g.handle_report(1.0, ml.Report(2, 1_160_000.0))
    assert g.levels.count(L.HIGH) == 2
    keep_up(g, 2.0)
    before = list(g.levels)
    g.handle_estimate(2.0, 0.0, True)
    assert g.levels == before


def test_passive_mode_ignores_estimates_and_creeps_no_faster_than_its_rule():
    g = ml.GlobalScheduler(mode=ml.Mode.PASSIVE)
    initial, creep, headroom = g.ceiling_bps, g.creep_bps_per_s, g.headroom
    assert not g.handle_estimate(0.0, 100e6, True)
    upgrades, last = [], list(g.levels)
    for tick in range(6000):
        now = tick / 10
        g.handle_tick(now)
        if tick % 10 == 0:
            keep_up(g, now)
        if g.levels != last:
            upgrades.append((now, sum(l.rate_bps for l in g.levels)))
            last = list(g.levels)
    assert len(upgrades) >= 3
    for at, rate in upgrades:
        assert at + 1e-6 >= (rate / headroom - initial) / creep
    assert g.levels == [L.HIGH] * 3


def test_which_records_become_estimates():
    r = lambda **kw: Record.from_json(rec(**kw))  # noqa: E731
    assert ml.estimate_of(r(source="active", final=True, value=5e6)) == (5e6, True)
    assert ml.estimate_of(r(source="active", final=False)) is None, "rough: wait for the refinement"
    assert ml.estimate_of(r(source="passive", value=3e6)) == (3e6, False)
    assert ml.estimate_of(r(source="testbed")) is None
    assert ml.estimate_of(r(metric="rtt", source="active")) is None
    assert ml.estimate_of(r(source="active", value=float("nan"))) is None


def test_follows_a_scripted_agent_over_the_api(server):  # noqa: F811
    url, routes, seen = server
    # No estimate yet (404), then a rough and a final one over SSE.
    routes["/v1/estimate"] = lambda q: q.send_json(404, {"error": "no avail_bw estimates"})

    def sse(q: Req) -> None:
        q.start_sse()
        for value, final in ((1e6, False), (4.5e6, True)):
            d = json.loads(ev_json("estimate", value))
            d["record"]["final"] = final
            q.chunk(f"event: estimate\ndata: {json.dumps(d)}\n\n".encode())
        q.end_chunks()

    routes["/v1/events"] = sse
    out = io.StringIO()
    g = ml.GlobalScheduler()
    used = ml.follow(Client(url), g, "198.18.3.2", None, out, True, 5.0)
    assert used == 1, out.getvalue()
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    # 4.5 Mbit/s spare beside the streams' 648 kbit/s: every stream at full.
    assert line["levels"] == ["high"] * 3 and line["fps"] == 90.0
    assert {p for p, _, _ in seen} == {"/v1/estimate", "/v1/events"}
    assert seen[-1][1]["peer"] == ["198.18.3.2"]


def test_cli_says_why_when_the_agent_is_unreachable(capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert ml.main(["--agent", f"http://127.0.0.1:{port}", "--peer", "198.18.3.2"]) == 1
    assert "refused" in capsys.readouterr().err

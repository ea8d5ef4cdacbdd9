#!/usr/bin/env python3
"""MediaNet's global scheduler in Python: the short twin of `examples/medianet` (Rust).

It shows how an application uses mgrp through the public HTTP API alone: take the newest
estimate of the path (``GET /v1/estimate``), then follow every new one (``GET /v1/events``,
Server-Sent Events), and choose the level of each of three video streams that maximises the
summed utility under what the path gives the application. The rules are those of
``examples/medianet/src/global.rs`` (seed 002 §5, seed 000 ch. 6), with the same test vectors
(``tests/test_medianet_twin.py``):

- **floor**: what the streams sustain now (their reports); the bound is never below it;
- **ceiling**: an *active* estimate counts the streams' own traffic as load, so their rate is
  added back; a *passive* (Wren) estimate is taken as it is; rough estimates (``final: false``)
  wait for their refinement; a report that dropped frames lowers the ceiling to what was
  sustained. Without mgrp (``Mode.PASSIVE``, the original MediaNet) the ceiling only creeps up;
- **choice**: the combination with the most utility whose rate fits
  max(headroom × ceiling, floor); ties go to the fewest changed streams, then the higher rate.

Run against a local agent that schedules the peer (``mgrp agent --config``; see docs/service.md)::

    python3 medianet_levels.py --agent http://127.0.0.1:7241 --peer 198.18.3.2
    python3 medianet_levels.py --agent http://127.0.0.1:7241 --path '198.18.1.2->198.18.3.2' --json

This twin has no streams of its own: it prints the levels it would choose, taking the levels it
chose as sustained (each estimate is then judged as the Rust sender would judge it while its
streams keep up). An application feeds its own reports through ``GlobalScheduler.handle_report``.
Standard library and ``mgrp_client`` only.
"""

from __future__ import annotations

import argparse
import enum
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple


class Level(enum.Enum):
    """A stream's level: (rate bit/s, frames per second, utility), as in workload.rs."""

    LOW = (216_000.0, 2.0, 0.3)  # I frames only
    MEDIUM = (704_000.0, 10.0, 0.5)  # I + P
    HIGH = (1_160_000.0, 30.0, 1.0)  # I + P + B

    @property
    def rate_bps(self) -> float:
        return self.value[0]

    @property
    def fps(self) -> float:
        return self.value[1]

    @property
    def utility(self) -> float:
        return self.value[2]


class Mode(enum.Enum):
    PASSIVE = "passive"  # the original MediaNet: no estimates, the ceiling creeps
    MGRP = "mgrp"  # the ceiling comes from mgrp's estimates


def choose(current: Sequence[Level], bound_bps: float) -> List[Level]:
    """The combination with the most utility that fits ``bound_bps`` (every stream low when
    nothing fits): ties go to the fewest changed streams, then the higher rate."""
    best = None
    for combo in itertools.product(list(Level), repeat=len(current)):
        rate = sum(l.rate_bps for l in combo)
        if rate > bound_bps:
            continue
        utility = sum(l.utility for l in combo)
        changes = sum(a != b for a, b in zip(combo, current))
        key = (round(utility, 9), -changes, rate)
        if best is None or key > best[0]:
            best = (key, list(combo))
    return best[1] if best else [Level.LOW] * len(current)


@dataclass
class Report:
    """A stream's report: the rate it sustained and the frames it dropped (a failure)."""

    stream: int
    sent_bps: float
    dropped: int = 0


@dataclass
class GlobalScheduler:
    mode: Mode = Mode.MGRP
    streams: int = 3
    headroom: float = 0.9
    creep_bps_per_s: float = 20_000.0
    creep_hold_s: float = 5.0
    ceiling_bps: float = 3 * Level.LOW.rate_bps / 0.9
    levels: List[Level] = field(default_factory=list)
    latest: List[Optional[Report]] = field(default_factory=list)
    switches: int = 0
    _hold_until: float = 0.0
    _last_tick: Optional[float] = None

    def __post_init__(self) -> None:
        self.levels = [Level.LOW] * self.streams
        self.latest = [None] * self.streams

    def floor_bps(self) -> float:
        return sum(r.sent_bps for r in self.latest if r is not None)

    def handle_report(self, now: float, r: Report) -> None:
        if not 0 <= r.stream < self.streams:
            return
        self.latest[r.stream] = r
        if r.dropped > 0:
            self.ceiling_bps = min(self.ceiling_bps, self.floor_bps())
            self._hold_until = now + self.creep_hold_s
        self._decide()

    def handle_estimate(self, now: float, bps: float, includes_own: bool) -> bool:
        """An available-bandwidth figure; False when ignored (passive mode, not a number)."""
        if self.mode is not Mode.MGRP or not (bps >= 0.0 and bps != float("inf")):
            return False
        self.ceiling_bps = bps + (self.floor_bps() if includes_own else 0.0)
        self._decide()
        return True

    def handle_tick(self, now: float) -> None:
        last = self._last_tick if self._last_tick is not None else now
        self._last_tick = now
        if self.mode is Mode.PASSIVE and now >= self._hold_until:
            top = self.streams * Level.HIGH.rate_bps / self.headroom
            if self.ceiling_bps < top:
                dt = max(0.0, now - max(last, self._hold_until))
                self.ceiling_bps = min(self.ceiling_bps + self.creep_bps_per_s * dt, top)
        self._decide()

    def _decide(self) -> None:
        bound = max(self.ceiling_bps * self.headroom, self.floor_bps())
        nxt = choose(self.levels, bound)
        self.switches += sum(a != b for a, b in zip(nxt, self.levels))
        self.levels = nxt


def estimate_of(record: Any) -> Optional[Tuple[float, bool]]:
    """(bit/s, includes_own) from an agent's :class:`mgrp_client.Record`, or None when the
    scheduler should not use it: another metric, a rough active estimate (``final: false``,
    its refinement follows), a non-finite value, or a source that is not a measurement."""
    v = record.value
    if record.metric != "avail_bw" or not math.isfinite(v):
        return None
    if record.source == "active" and record.final:
        return (v, True)
    if record.source == "passive":
        return (v, False)
    return None


def follow(client: Any, gs: GlobalScheduler, peer: Optional[str], path: Optional[str],
           out: Any, as_json: bool, duration: Optional[float]) -> int:
    """Feed the agent's estimates to ``gs`` and print each decision; returns estimates used."""
    from mgrp_client import ApiError, Event

    used = 0
    t0 = time.monotonic()

    def take(rec: Any) -> None:
        nonlocal used
        e = estimate_of(rec)
        if e is None:
            return
        now = time.monotonic() - t0
        # No streams here: the levels chosen so far count as sustained.
        for i, l in enumerate(gs.levels):
            gs.handle_report(now, Report(i, l.rate_bps))
        if gs.handle_estimate(now, *e):
            used += 1
            show(now, e[0])

    def show(now: float, bps: float) -> None:
        names = [l.name.lower() for l in gs.levels]
        if as_json:
            out.write(json.dumps({"t_s": round(now, 3), "estimate_bps": bps,
                                  "ceiling_bps": gs.ceiling_bps, "levels": names,
                                  "fps": sum(l.fps for l in gs.levels)}) + "\n")
        else:
            out.write(f"{now:7.1f} s  estimate {bps / 1e6:6.2f} Mbit/s  ceiling "
                      f"{gs.ceiling_bps / 1e6:6.2f}  levels {'/'.join(names)}\n")
        out.flush()

    try:
        take(client.estimate(path=path, peer=peer))
    except ApiError as err:
        if err.status != 404:  # 404: no estimate yet, the events bring the first one
            raise
    # Until the first estimate of a path the agent answers 404 (it knows no such series yet):
    # subscribe again once a second, within the duration.
    while True:
        try:
            left = None if duration is None else duration - (time.monotonic() - t0)
            if left is not None and left <= 0:
                return used
            with client.events(path=path, peer=peer, duration=left) as stream:
                for ev in stream:
                    if isinstance(ev, Event):
                        take(ev.record)
            return used
        except ApiError as err:
            if err.status != 404:
                raise
            time.sleep(1.0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", default="http://127.0.0.1:7241", help="the local agent's HTTP API")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--peer", help="a peer the agent schedules")
    g.add_argument("--path", help="a path by name, SRC->DST (e.g. Wren's estimates)")
    p.add_argument("--token", help="API token (not needed on localhost)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--json", action="store_true", help="one JSON line per decision")
    a = p.parse_args(argv)
    from mgrp_client import AgentUnreachable, ApiError, Client

    try:
        used = follow(Client(a.agent, token=a.token), GlobalScheduler(), a.peer, a.path,
                      sys.stdout, a.json, a.duration)
    except (ApiError, AgentUnreachable) as e:
        print(f"medianet_levels: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    print(f"{used} estimates used", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tabulate `mgrp bench tracking --app-flow` JSON files (tracking.json): one line per scenario
with the riders' arm, added load (whole run and settled), errors, follow times, rider fill and
the held delay. Usage: summary.py DIR_OR_FILE...

Rode counts the padding left unused in probes that carried (`spare_bytes`) where the run
recorded it (round 19 on); before, it was missing and "rode" read high (docs/tracking.md,
round 19). App resent: the application's retransmitted payload / C (round 19 on)."""
import json
import os
import sys


def rows(path):
    if os.path.isdir(path):
        path = os.path.join(path, "tracking.json")
    with open(path) as f:
        for row in json.load(f)["rows"]:
            yield os.path.basename(os.path.dirname(path)) or path, row


def pct(v):
    return "-" if v is None else f"{100 * v:.2f}%"


print("| run | C | cross | riders | s | added | settled | app resent | median / p90 | sampled | follow (s) | est/min | rode | held (share of packets) | held p50 / p99 (ms) | expired |")
print("|---|---:|---|---|---:|---:|---:|---:|---|---|---|---:|---:|---:|---|---:|")
for arg in sys.argv[1:]:
    for name, r in rows(arg):
        rd = r.get("riders") or {}
        offered = rd.get("rider_bytes", 0) + rd.get("empty_bytes", 0) + rd.get("spare_bytes", 0)
        rode = rd["rider_bytes"] / offered if offered else None
        held = "-"
        if rd.get("held_p50_us") is not None:
            held = f"{rd['held_p50_us'] / 1e3:.1f} / {rd['held_p99_us'] / 1e3:.1f}"
        share = "-"
        if rd.get("tun_packets"):
            share = f"{100 * rd['held_packets'] / rd['tun_packets']:.1f}%"
        expired = rd.get("expired_packets", "-")
        tcp = r.get("app_tcp")
        resent = "-"
        if tcp:
            resent = pct(tcp["bytes_retrans"] * 8 / r["secs"] / (r["capacity_mbit"] * 1e6))
        follow = ", ".join("-" if f is None else f"{f:.1f}" for f in r["follow_s"])
        print(
            f"| {name} | {r['capacity_mbit']:g} | {r['cross']} | {'wait' if r['elastic'] else 'rigid'} "
            f"| {r['secs']:.0f} | {pct(r.get('added_load_share'))} | {pct(r.get('added_load_share_settled'))} | {resent} "
            f"| {pct(r['median_err'])} / {pct(r['p90_err'])} "
            f"| {pct(r['median_err_sampled'])} / {pct(r['p90_err_sampled'])} | {follow} "
            f"| {r['per_minute']:.0f} | {pct(rode)} | {share} | {held} | {expired} |"
        )

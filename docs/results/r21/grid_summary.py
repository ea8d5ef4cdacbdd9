#!/usr/bin/env python3
"""Issue 20's figures per cross kind from `mgrp bench accuracy` JSON files (auto runs):
median / p90 / worst error, runs > 50% off, coverage at the stated scale, final time and
bytes; then stated confidence against the share held, per stated value.
Usage: grid_summary.py FILE.json[:C] [...] (":C" keeps only the runs at C Mbit/s)"""
import collections, json, sys


def q(v, p):
    """Type-7 quantile (linear between ranks), as `mgrp_train::stats` reads them."""
    v = sorted(v)
    if not v:
        return float("nan")
    h = p * (len(v) - 1)
    lo, hi = int(h), min(len(v) - 1, int(h) + 1)
    return v[lo] + (v[hi] - v[lo]) * (h - lo)


def load(arg):
    path, _, cap = arg.partition(":")
    return [r for r in json.load(open(path)) if not cap or r["capacity_mbit"] == float(cap)]


runs = [r for a in sys.argv[1:] for r in load(a) if r["method"] == "auto"]
by = collections.defaultdict(list)
for r in runs:
    by[(r["capacity_mbit"], r["kind"])].append(r)
print("| C | kind | runs | median err | p90 | worst | > 50% off | held (scale) | final s (median) | kB (median) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for (c, k), rs in sorted(by.items()):
    e = [r["rel_error"] for r in rs if r["rel_error"] is not None]
    held = [r["covered_scale"] for r in rs if r.get("covered_scale") is not None]
    print(
        f"| {c:.0f} | {k} | {len(rs)} | {100*q(e,.5):.1f}% | {100*q(e,.9):.1f}% | {100*max(e):.1f}% "
        f"| {sum(x > .5 for x in e)} | {sum(held)}/{len(held)} | {q([r['final_s'] for r in rs],.5):.2f} "
        f"| {q([r['probe_bytes']/1e3 for r in rs],.5):.0f} |"
    )
e = [r["rel_error"] for r in runs if r["rel_error"] is not None]
held = [r["covered_scale"] for r in runs if r.get("covered_scale") is not None]
print(f"\nall {len(runs)}: median {100*q(e,.5):.1f}%, p90 {100*q(e,.9):.1f}%, > 50% off {sum(x > .5 for x in e)}, "
      f"held {sum(held)}/{len(held)} ({100*sum(held)/max(1,len(held)):.0f}%), "
      f"first {q([r['first_s'] for r in runs if r['first_s'] is not None],.5):.2f} s, final {q([r['final_s'] for r in runs],.5):.2f} s")
print("\n| stated confidence | final phase | runs | held at the stated scale |")
print("|---:|---|---:|---:|")
rel = collections.defaultdict(lambda: [0, 0])
for r in runs:
    if r.get("covered_scale") is None:
        continue
    k = (r["confidence"], (r.get("final_method") or "")[5:])
    rel[k][0] += 1
    rel[k][1] += r["covered_scale"]
for (c, m), (n, h) in sorted(rel.items()):
    print(f"| {c:.2f} | {m} | {n} | {h} ({100*h/n:.0f}%) |")

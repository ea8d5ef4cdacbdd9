#!/usr/bin/env python3
"""Issue 20's figures per cross kind from `mgrp bench accuracy` JSON files (auto runs):
median / p90 / worst error, runs > 50% off, the same against the truth at the stated time scale, coverage at the stated scale, final time and
bytes; then stated confidence against the share held, per stated value.
Usage: grid_summary.py FILE.json[:C] [...] (".json.gz" too; ":C" keeps only the runs at C Mbit/s)"""
import collections, gzip, json, sys


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
    f = gzip.open(path) if path.endswith(".gz") else open(path)
    return [r for r in json.load(f) if not cap or r["capacity_mbit"] == float(cap)]


def scale_error(r):
    """Error against the truth at the stated time scale (issue 20 judges on/off and STEP there);
    computed from the truth for files written before the bench kept `rel_error_scale`."""
    if r.get("rel_error_scale") is not None:
        return r["rel_error_scale"]
    t, e = r.get("truth_scale_mbit"), r.get("estimate_mbit")
    if t is None or e is None:
        return None
    return abs(e - t) / max(t, 0.05 * r["capacity_mbit"])


runs = [r for a in sys.argv[1:] for r in load(a) if r["method"] == "auto"]
by = collections.defaultdict(list)
for r in runs:
    by[(r["capacity_mbit"], r["kind"])].append(r)
print("| C | kind | runs | median err | p90 | worst | > 50% off | err at the stated scale: median / p90 / > 50% | held (scale) | final s (median) | kB (median) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (c, k), rs in sorted(by.items()):
    e = [r["rel_error"] for r in rs if r["rel_error"] is not None]
    es = [x for x in map(scale_error, rs) if x is not None]
    held = [r["covered_scale"] for r in rs if r.get("covered_scale") is not None]
    print(
        f"| {c:.0f} | {k} | {len(rs)} | {100*q(e,.5):.1f}% | {100*q(e,.9):.1f}% | {100*max(e):.1f}% "
        f"| {sum(x > .5 for x in e)} | {100*q(es,.5):.1f}% / {100*q(es,.9):.1f}% / {sum(x > .5 for x in es)} "
        f"| {sum(held)}/{len(held)} | {q([r['final_s'] for r in rs],.5):.2f} "
        f"| {q([r['probe_bytes']/1e3 for r in rs],.5):.0f} |"
    )
e = [r["rel_error"] for r in runs if r["rel_error"] is not None]
es = [x for x in map(scale_error, runs) if x is not None]
held = [r["covered_scale"] for r in runs if r.get("covered_scale") is not None]
print(f"\nall {len(runs)}: median {100*q(e,.5):.1f}%, p90 {100*q(e,.9):.1f}%, > 50% off {sum(x > .5 for x in e)} "
      f"(at the stated scale: {100*q(es,.5):.1f}%, {100*q(es,.9):.1f}%, {sum(x > .5 for x in es)}), "
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


def stolen_trains(r):
    """Share of the run's trains flagged stolen (runs with `--trace`), else None."""
    t = r.get("trains") or []
    return sum(x["stolen"] for x in t) / len(t) if t else None


# Runs by how much the hypervisor took while they ran: the host's steal (`host_steal`, share of
# the CPU it took most from) where the bench kept it, else the share of trains flagged stolen.
for label, key, bands in [
    ("host steal during the run", lambda r: r.get("host_steal"), [(0, .01), (.01, .03), (.03, 1.01)]),
    ("trains flagged stolen", stolen_trains, [(0, .2), (.2, .4), (.4, 1.01)]),
]:
    have = [(key(r), r) for r in runs if key(r) is not None]
    if not have:
        continue
    print(f"\n| {label} | runs | median err | p90 | > 50% off | final s (median) | time average |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for lo, hi in bands:
        g = [r for k, r in have if lo <= k < hi]
        if not g:
            continue
        e = [r["rel_error"] for r in g if r["rel_error"] is not None]
        print(f"| {100*lo:.0f}–{min(100, 100*hi):.0f}% | {len(g)} | {100*q(e,.5):.1f}% | {100*q(e,.9):.1f}% "
              f"| {sum(x > .5 for x in e)} | {q([r['final_s'] for r in g],.5):.2f} "
              f"| {sum((r.get('final_method') or '').endswith('timeavg') for r in g)} |")

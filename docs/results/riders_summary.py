"""Tables of `mgrp bench riders --out FILE` runs: python3 riders_summary.py FILE [FILE ...]."""
import json, sys, statistics as st

rows = [r for f in sys.argv[1:] for r in json.load(open(f))['rows']]


def mode(r):
    return 'off' if not r['riders'] else ('elastic' if r['elastic'] else 'on')


def q(v, p):
    v = sorted(v)
    if not v:
        return None
    k = (len(v) - 1) * p
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def pct(x):
    return '-' if x is None else f"{100 * x:.0f}%"


def signed(r, i):
    # (estimate − truth) / truth of each completed measurement; older files have no readings.
    return [(x[i] - x[2]) / x[2] for x in r.get('readings_mbit', []) if x[i] is not None]


out = ["| cross | probe | riders | runs | probe-only kB per run (median, min–max) | probe kB sent (median) "
       "| shed (median, min–max of runs) | measurements done | err adjusted: median (p25–p75), p90 "
       "| signed adjusted median | err unadjusted: median | signed unadjusted median "
       "| source median Mb/s | source < 3.8 Mb/s |",
       "|---|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
for cross in dict.fromkeys(r['cross'] for r in rows):
    for probe in dict.fromkeys(r['probe'] for r in rows):
        for m in ['off', 'on', 'elastic']:
            rs = [r for r in rows if r['cross'] == cross and r['probe'] == probe and mode(r) == m]
            if not rs:
                continue
            po = [r['probe_only_bytes'] / 1e3 for r in rs]
            sent = [r['probe_bytes'] / 1e3 for r in rs]
            # Shed: probe-only bytes over the bytes the same trains asked for (sent + left out
            # by elastic trains), all of which riders off would have sent as probe-only.
            sheds = [1 - r['probe_only_bytes'] / max(1, r['probe_bytes'] + r['skipped_bytes']) for r in rs]
            ea = [e for r in rs for e in r['errs_adjusted']]
            eu = [e for r in rs for e in r['errs_unadjusted']]
            sa = [e for r in rs for e in signed(r, 0)]
            su = [e for r in rs for e in signed(r, 1)]
            done = sum(r['completed'] for r in rs)
            meas = sum(r['measurements'] for r in rs)
            src = st.median([r['source_median_mbit'] for r in rs])
            below = st.median([r['source_below_pct'] for r in rs])
            shed = '-' if m == 'off' else f"{pct(st.median(sheds))} ({pct(min(sheds))}–{pct(max(sheds))})"
            out.append(
                f"| {cross} | {probe} | {m} | {len(rs)} | {st.median(po):.0f} ({min(po):.0f}–{max(po):.0f}) "
                f"| {st.median(sent):.0f} | {shed} | {done}/{meas} "
                f"| {pct(q(ea, .5))} ({pct(q(ea, .25))}–{pct(q(ea, .75))}), {pct(q(ea, .9))} "
                f"| {'-' if not sa else f'{100 * q(sa, .5):+.0f}%'} | {pct(q(eu, .5))} "
                f"| {'-' if not su else f'{100 * q(su, .5):+.0f}%'} | {src:.2f} | {below:.0f}% |")
print("\n".join(out))

"""Replay the rider correction of each tracker round from a `mgrp bench tracking` JSON whose
`streams` carry `arrived_bytes`, `beside_bytes`, `host_bytes_per_s` and `span_ns` (riders9 on).
The held (raw) value is the published one plus the correction the run applied; each rule's
correction is the round's displaced bits over its streams' spans (RiderAware pools up to 12
trains; a round has 1-5). Also: how often streams read rising by their rate over C - X, split by
whether >= 2 kB of the host's traffic crossed the path beside them (held packets that left at
their deadline during the train).

    python3 docs/results/tracking_rider_replay.py docs/results/tracking-r8-*.json
"""
import bisect, json, sys


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else float('nan')


RULES = ['count / span (main)', 'host x share (riders9)', 'host - beside / span',
         'count / planned span']


def displaced(s):
    """Bits each rule says the train displaced."""
    span = s['span_ns'] / 1e9
    host = s['host_bytes_per_s'] * 8
    arr, comp, bes = s['arrived_bytes'], s['competing_bytes'], s['beside_bytes']
    share = 1.0 if (arr, bes) == (0, 0) else (0.0 if arr == 0 else min(comp / arr, 1.0))
    planned = span * (s['planned'] - 1) / max(s['sent'] - 1, 1)
    if host == 0:  # rigid trains: every rule but the planned span keeps the count
        return {k: (comp * 8, planned if 'planned' in k else span) for k in RULES}
    return {
        'count / span (main)': (comp * 8, span),
        'host x share (riders9)': (host * share * span, span),
        'host - beside / span': (max(host * span - bes * 8, 0.0), span),
        'count / planned span': (comp * 8, planned),
    }


for path in sys.argv[1:]:
    r = json.load(open(path))['rows'][0]
    st, rec, app = r['streams'], r['record'], r.get('app_bps') or 0.0
    if not st or 'span_ns' not in st[0]:
        print(path, ': no span_ns in the streams (recorded before riders9)')
        continue
    errs, need, applied, prev = {}, [], [], -1.0
    for e in rec:
        t, tr = e['t_s'], e['truth_bps']
        rnd = [s for s in st if prev < s['t_s'] <= t + 1e-3 and s['span_ns'] > 0]
        prev = t + 1e-3
        if not rnd or not tr:
            continue
        sums = {}
        for s in rnd:
            for k, (b, ns) in displaced(s).items():
                bb, nn = sums.get(k, (0.0, 0.0))
                sums[k] = (bb + b, nn + ns)
        corr = {k: b / ns for k, (b, ns) in sums.items()}
        elastic = any(s['host_bytes_per_s'] > 0 for s in rnd)
        cur = corr['host x share (riders9)' if elastic else 'count / span (main)']
        held = e['value_bps'] + cur
        need.append(held - tr)
        applied.append(cur)
        for k, c in corr.items():
            errs.setdefault(k, []).append(abs(max(held - c, 0.0) - tr) / tr)
    print(f"{path}: {len(need)} estimates; held - truth (needed) median {q(need, .5)/1e6:.2f} "
          f"(p10 {q(need, .1)/1e6:.2f}, p90 {q(need, .9)/1e6:.2f}) Mbit/s, applied median "
          f"{q(applied, .5)/1e6:.2f}")
    for k, v in errs.items():
        print(f"  {k:24s} median {100*q(v, .5):5.1f}%  p90 {100*q(v, .9):5.1f}%")
    truth = sorted((x['t_s'], x['truth_bps']) for x in rec if x['truth_bps'])
    ts = [t for t, _ in truth]
    bins = {}
    for s in st:
        if s['verdict'] not in ('rising', 'flat'):
            continue
        i = bisect.bisect_left(ts, s['t_s'])
        if i >= len(truth) or truth[i][0] - s['t_s'] > 2.0:
            continue
        # C - X: the truth is A less the application's payload rate; its frames are ~4% more.
        x = s['rate_bps'] / (truth[i][1] + app * 1.04)
        b = min(max(int(x * 10) / 10, 0.7), 1.2)
        k = 'beside >= 2 kB' if s['beside_bytes'] >= 2000 else 'beside < 2 kB'
        bins.setdefault((k, b), [0, 0])[s['verdict'] == 'rising'] += 1
    print('  rising of judged, by R / (C - X):')
    for (k, b) in sorted(bins):
        f, rr = bins[(k, b)]
        print(f"    {k:15s} {b:.1f}{'+' if b >= 1.2 else '-' if b <= 0.7 else ''}: {rr}/{f + rr}")

"""P(stream reads rising) by its rate over the truth of the second around it, from a
`mgrp bench tracking` JSON with `record` (truth per estimate) and `streams`."""
import json, sys, bisect
for path in sys.argv[1:]:
    for r in json.load(open(path))['rows']:
        rec = sorted((x['t_s'], x['truth_bps']) for x in r['record'])
        ts = [t for t, _ in rec]
        bins = {}
        for s in r['streams']:
            if s['verdict'] not in ('rising', 'flat'):
                continue
            # truth of the second that ends at the next estimate after the stream
            i = bisect.bisect_left(ts, s['t_s'])
            if i >= len(rec) or rec[i][0] - s['t_s'] > 2.0:
                continue
            x = s['rate_bps'] / rec[i][1]
            b = min(int(x * 10) / 10, 1.5)
            bins.setdefault(b, [0, 0])[s['verdict'] == 'rising'] += 1
        print(f"{path.split('/')[-1]} {r['capacity_mbit']:.0f} {r['cross']}: R/A bin: rising of judged")
        for b in sorted(bins):
            f, rr = bins[b]
            print(f"  {b:.1f}-{b+0.1:.1f}: {rr}/{f+rr} ({100*rr/(f+rr):.0f}%)")

"""Errors of `bench tracking --app-flow` records against A less the application's frames.

For records written before round 16's truth fix (every file in this directory), whose truth
took off the application's payload rate: 66 bytes of headers per 1448 are taken off as well.
    python3 docs/results/r16-riders-rate/retruth.py docs/results/r16-riders-rate/tracking-*.json
"""
import json, sys, statistics as st
def q(v,p):
    v=sorted(v); return v[int(round((len(v)-1)*p))] if v else float('nan')
for fn in sys.argv[1:]:
    d=json.load(open(fn))
    for r in d['rows']:
        app=r.get('app_bps') or 0
        extra=app*66/1448
        e=[]; s=[]
        for x in r['record']:
            t=x['truth_bps']-extra
            if t>0: e.append(abs(x['value_bps']-t)/t); s.append((x['value_bps']-t)/t)
        print(f"{fn.split('/')[-2] if fn.endswith('tracking.json') else fn.split('/')[-1]:28} {r['cross']:5} n={len(e):3} median {100*q(e,.5):5.1f}% p90 {100*q(e,.9):5.1f}% signed {100*st.median(s):+5.1f}% added {100*r['added_load_share']:.2f}% follow {r['follow_s']}")

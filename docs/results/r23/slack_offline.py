#!/usr/bin/env python3
"""Round 23: the time average's flat slack read again from finished runs. The slack only
shifts a time average's final value (by (0.75 − k)·δ, δ = C/10, where its top strata rose,
as they do under any load) and its low end by twice that, so runs measured with ¾ tell
what ½ would have read. Runs with no cross traffic are left out (top strata flat: no shift).
Usage (from the repository root): python3 docs/results/r23/slack_offline.py FILE...
(round 23 used docs/results/r22/grid-final.json docs/results/r22/ab-B-*.json.gz
docs/results/r23/ab-*.json.gz)"""
import gzip, json, statistics as st, sys
from collections import defaultdict
def load(f):
  return json.load(gzip.open(f) if f.endswith('.gz') else open(f))
runs=[r for f in sys.argv[1:] for r in load(f) if r['load_pct']>0]
def q(v,p): v=sorted(v); return v[min(len(v)-1,int(p*len(v)))]
print("| slack | runs | median err | p90 | > 50% off | time averages held | per C, kind: median / p90 / > 50% off |")
print("|---:|---:|---:|---:|---:|---:|---|")
for k in [0.75,0.625,0.5]:
  every=[]; by=defaultdict(list); held=tavg=0
  for r in runs:
    c=r['capacity_mbit']; t=r['truth_scale_mbit']; v=r['estimate_mbit']
    if 'timeavg' in str(r.get('final_method')):
      s=(0.75-k)*0.1*c; v=min(c,v+s); tavg+=1
      held+= r['low_mbit']+2*s<=t<=r['high_mbit']
    e=abs(v-t)/t; every.append(e); by[(c,r['kind'])].append(e)
  cells=' · '.join(f"{kk[1]}@{kk[0]:.0f} {100*st.median(v):.1f}/{100*q(v,.9):.0f}/{sum(x>.5 for x in v)}" for kk,v in sorted(by.items()))
  print(f"| {k} | {len(every)} | {100*st.median(every):.1f}% | {100*q(every,.9):.1f}% | {sum(x>.5 for x in every)} | {held}/{tavg} | {cells} |")

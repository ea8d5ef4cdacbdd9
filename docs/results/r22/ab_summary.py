#!/usr/bin/env python3
"""An interleaved A/B from traced runs (`ab-{A,B}-N.json.gz`): per round, per arm, and per arm
within the same share of trains flagged stolen; then the runs that ended with the time
average, split by the share of their last 40 trains (the time average's streams) that were
stolen with batched stamps.
Usage (from the repository root): python3 docs/results/r22/ab_summary.py [DIR [NAME ARMS]]
(DIR: docs/results/r22, round 22's stolen-stream rule, or docs/results/r23, round 23's
spoiled streams in the time average; `docs/results/r23 coarse CD`, its coarse-bound check.)"""
import glob, gzip, json, sys
DIR = sys.argv[1] if len(sys.argv) > 1 else 'docs/results/r22'
NAME = sys.argv[2] if len(sys.argv) > 2 else 'ab'
ARMS = sys.argv[3] if len(sys.argv) > 3 else 'AB'
def load(arm, rd):
  return json.load(gzip.open(f'{DIR}/{NAME}-{arm}-{rd}.json.gz'))

def q(v,p):
  v=sorted(v)
  if not v: return float('nan')
  h=p*(len(v)-1); lo=int(h); hi=min(len(v)-1,lo+1); return v[lo]+(v[hi]-v[lo])*(h-lo)
def share(r): return sum(x['stolen'] for x in r['trains'])/max(1,len(r['trains']))
def batched(r):
  t=r['trains'][-40:]
  return sum(1 for x in t if x['stolen'] and x.get('compressed',0)>0)/max(1,len(t))
def timeavg(r): return 'timeavg' in str(r.get('final_method'))
def line(name,runs):
  e=[r['rel_error'] for r in runs]; f=[r['final_s'] for r in runs]; b=[r['probe_bytes']/1e3 for r in runs]
  t=[len(r['trains']) for r in runs]; s=[share(r) for r in runs]
  print(f"| {name} | {len(runs)} | {100*q(e,.5):.1f}% | {100*q(e,.9):.1f}% | {sum(x>.5 for x in e)} | {sum(bool(r['covered_scale']) for r in runs)} | {q(f,.5):.2f} | {q(f,.9):.2f} | {q(b,.5):.0f} | {q(t,.5):.0f} | {100*q(s,.5):.0f}% |")
print("| arm | runs | median err | p90 | > 50% off | held (scale) | final s | final p90 | kB | trains | trains flagged stolen |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
rounds=sorted({f.split('-')[-1][:-8] for f in glob.glob(f'{DIR}/{NAME}-{ARMS[0]}-*.json.gz')})
for rd in rounds:
  for arm in ARMS:
    line(f"{arm} round {rd}", load(arm, rd))
for arm in ARMS:
  line(f"{arm} all", [r for rd in rounds for r in load(arm, rd)])
# Only runs with few stolen trains, and with many: same steal, both arms.
for lo,hi in [(0,.2),(.2,1.01)]:
  for arm in ARMS:
    g=[r for rd in rounds for r in load(arm, rd) if lo<=share(r)<hi]
    if g: line(f"{arm}, {100*lo:.0f}–{min(100,100*hi):.0f}% flagged", g)
print()
print("Runs that ended with the time average, by the share of its streams stolen with batched stamps:")
print()
print("| arm | runs | median err | signed median | p90 | > 50% off | held (scale) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for lo,hi in [(0,.05),(.05,.2),(.2,1.01),(0,1.01)]:
  for arm in ARMS:
    g=[r for rd in rounds for r in load(arm, rd) if timeavg(r) and lo<=batched(r)<hi]
    if not g: continue
    e=[r['rel_error'] for r in g]
    sg=[(r['estimate_mbit']-r['truth_mbit'])/r['truth_mbit'] for r in g]
    print(f"| {arm}, {100*lo:.0f}–{min(100,100*hi):.0f}% | {len(g)} | {100*q(e,.5):.1f}% | {100*q(sg,.5):+.1f}% | {100*q(e,.9):.1f}% | {sum(x>.5 for x in e)} | {sum(bool(r['covered_scale']) for r in g)} |")

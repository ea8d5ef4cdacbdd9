"""Tables of the r15 A/B (mean vs gated median): python3 ab_tables.py o100,o20,s100,s20,x100,x20
Files are NAME-I-ARM.json from `mgrp bench accuracy --results DIR --name NAME-I-ARM`."""
import os
DIR = os.path.dirname(os.path.abspath(__file__))
import json,sys,glob,collections
def q(v,p):
    v=sorted(v)
    if not v: return float('nan')
    k=(len(v)-1)*p; f=int(k); c=min(f+1,len(v)-1); return v[f]+(v[c]-v[f])*(k-f)
def load(tags):
  arms=collections.defaultdict(list)
  for tag in tags:
    for f in sorted(glob.glob(f'{DIR}/{tag}-*.json')):
      arms[f.split('-')[-1][:-5]]+=json.load(open(f))
  return arms
def stats(r):
  e=[x['rel_error']*100 for x in r]
  sg=[(x['estimate_mbit']-x['truth_mbit'])/max(x['truth_mbit'],0.05*x['capacity_mbit'])*100 for x in r]
  sl=[x['rel_error']*100 for x in r if x['final_method']=='auto:slops']
  return len(r), q(e,.5), q(e,.9), sum(1 for x in e if x>50), sum(1 for x in r if x['covered_scale']), q(sg,.5), len(sl), q(sl,.5), q(sl,.9)
def table(arms, keyf, title):
  print(f"\n{title}\n")
  print("| | runs | median err | p90 | > 50% | held at scale | signed median | ended with the search: runs, median / p90 |")
  print("|---|---:|---:|---:|---:|---:|---:|---|")
  keys=sorted({keyf(r) for a in arms.values() for r in a})
  for k in keys:
    for a in ['main','median']:
      r=[x for x in arms[a] if keyf(x)==k]
      n,m,p,w,h,s,ns,ms,ps=stats(r)
      name=f"{int(k[0])} {' '.join(str(z) for z in k[1:])}{'%' if len(k)>2 else ''} {'mean (main)' if a=='main' else '**median**'}"
      print(f"| {name} | {n} | {m:.1f}% | {p:.1f}% | {w} | {h}/{n} | {s:+.1f}% | {ns}: {ms:.1f}% / {ps:.1f}% |")
tags=sys.argv[1].split(',')
arms=load(tags)
table(arms, lambda x:(x['capacity_mbit'],x['kind']), "Pooled by kind")
table(arms, lambda x:(x['capacity_mbit'],x['kind'],x['load_pct']), "Per cell")

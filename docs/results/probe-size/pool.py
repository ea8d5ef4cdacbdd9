import json,sys,glob,os,re,statistics as st,collections
# usage: pool.py PREFIX  -> pools PREFIX-ARM-ROUND.json (next to this script) by arm and cell
pre=sys.argv[1]
g=collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), f'{pre}-*.json'))):
    m=re.match(rf'.*/{re.escape(pre)}-(.+)-(\d+)\.json',f); arm=m.group(1)
    for r in json.load(open(f)):
        g[(r['capacity_mbit'],r['kind'],r['load_pct'],arm)].append(r)
q=lambda a,f:sorted(a)[min(len(a)-1,int(f*len(a)))]
print(f"{'cell':22s} {'arm':6s} {'n':>3s} {'med err':>8s} {'p90':>7s} {'worst':>7s} {'signed med':>10s} {'held':>6s} {'kB':>6s} {'final s':>7s}")
for k in sorted(g):
    rs=g[k]; e=[r['rel_error'] for r in rs]; s=[(r['estimate_mbit']-r['truth_mbit'])/r['truth_mbit'] for r in rs]
    print(f"{k[0]:.0f}/{k[1]}/{k[2]:<10} {k[3]:6s} {len(rs):3d} {100*st.median(e):7.1f}% {100*q(e,.9):6.1f}% {100*max(e):6.1f}% {100*st.median(s):+9.1f}% {sum(r['covered_scale'] for r in rs):3d}/{len(rs):<3d} {st.median(r['probe_bytes'] for r in rs)/1e3:6.0f} {st.median(r['final_s'] for r in rs):7.2f}")

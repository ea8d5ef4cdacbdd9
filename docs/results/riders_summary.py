import json,sys,statistics as st
d=json.load(open(sys.argv[1]))
rows=d['rows']
def mode(r): return 'off' if not r['riders'] else ('elastic' if r['elastic'] else 'on')
def q(v,p):
    v=sorted(v); 
    if not v: return None
    k=(len(v)-1)*p; f=int(k); c=min(f+1,len(v)-1); return v[f]+(v[c]-v[f])*(k-f)
def pct(x): return '-' if x is None else f"{100*x:.0f}%"
out=[]
out.append("| probe | riders | runs | probe-only kB per run (median, min–max) | probe kB sent (median) | skipped kB (median) | probe-only share of asked bytes → shed (median, min–max of runs) | measurements done | err adjusted: median (p25–p75) | err unadjusted: median | source median Mb/s | source < 3.8 Mb/s |")
out.append("|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|")
summary={}
for probe in ['pslow','pfast']:
    offs=[r for r in rows if r['probe']==probe and mode(r)=='off']
    off_med=st.median([r['probe_only_bytes'] for r in offs]) if offs else None
    for m in ['off','on','elastic']:
        rs=[r for r in rows if r['probe']==probe and mode(r)==m]
        if not rs: continue
        po=[r['probe_only_bytes']/1e3 for r in rs]
        sent=[r['probe_bytes']/1e3 for r in rs]
        sk=[r['skipped_bytes']/1e3 for r in rs]
        # shed per run against the same run's riders-off row
        # shed: probe-only bytes over the bytes the same trains asked for (sent + left out by
        # elastic trains), which riders off would all have sent as probe-only
        sheds=[1-r['probe_only_bytes']/max(1,r['probe_bytes']+r['skipped_bytes']) for r in rs]
        ea=[e for r in rs for e in r['errs_adjusted']]
        eu=[e for r in rs for e in r['errs_unadjusted']]
        done=sum(r['completed'] for r in rs); meas=sum(r['measurements'] for r in rs)
        src=st.median([r['source_median_mbit'] for r in rs]); below=st.median([r['source_below_pct'] for r in rs])
        out.append(f"| {probe} | {m} | {len(rs)} | {st.median(po):.0f} ({min(po):.0f}–{max(po):.0f}) | {st.median(sent):.0f} | {st.median(sk):.0f} | {'-' if m=='off' else pct(st.median(sheds))+' ('+pct(min(sheds))+'–'+pct(max(sheds))+')'} | {done}/{meas} | {pct(q(ea,.5))} ({pct(q(ea,.25))}–{pct(q(ea,.75))}) | {pct(q(eu,.5))} | {src:.2f} | {below:.0f}% |")
        summary[(probe,m)]=(q(ea,.5),ea)
print("\n".join(out))
for k,v in summary.items(): print(k, [round(x,3) for x in sorted(v[1])])

"""Re-read `auto_study`'s time-average lines (runs ending with `auto:timeavg`): per run the stated
value, the uncorrected area, the best-fitting step and the isotonic fit's 0.5 crossing, against
the truth. python3 docs/results/r16-poisson75-timeavg.py docs/results/r16-poisson75-timeavg.txt 20
(the last argument: C in Mbit/s)."""
import re,sys,statistics as st
txt=open(sys.argv[1]).read().split('\n')
runs=[];cur=None
for l in txt:
    m=re.match(r'run \d+: (\S+) ([\d.]+) \[.*truth ([\d.]+)',l)
    if m: cur={'m':m.group(1),'v':float(m.group(2)),'t':float(m.group(3))}; runs.append(cur)
    if 'time average by rate' in l and cur:
        cells=l.split(':',1)[1].split()
        cur['s']=[(float(c[:-1]),{'F':1,'R':0,'?':.5,'-':.5}[c[-1]]) for c in cells]
C=float(sys.argv[2]) if len(sys.argv)>2 else 20
rows=[]
for r in runs:
    if 's' not in r: continue
    s=r['s']; n=len(s); w=C/n
    area=sum(x for _,x in s)*w
    # best step: threshold k strata flat below, minimize misfit
    best=min(range(n+1),key=lambda k:(sum(1-x for _,x in s[:k])+sum(x for _,x in s[k:]),k))
    # ties: take middle of all minimizing k
    cost=lambda k: sum(1-x for _,x in s[:k])+sum(x for _,x in s[k:])
    mc=min(cost(k) for k in range(n+1)); ks=[k for k in range(n+1) if cost(k)==mc]
    step=st.mean(ks)*w
    # isotonic (PAVA) decreasing fit then 0.5 crossing
    ys=[x for _,x in s]; blocks=[[y,1] for y in ys]
    i=0
    out=[]
    for y in ys:
        out.append([y,1])
        while len(out)>1 and out[-2][0]<out[-1][0]:
            a=out.pop(); b=out.pop(); out.append([(a[0]*a[1]+b[0]*b[1])/(a[1]+b[1]),a[1]+b[1]])
    fit=[];[fit.extend([v]*c) for v,c in out]
    iso_area=sum(fit)*w
    med=sum(1 for f in fit if f>0.5)*w+sum(0.5 for f in fit if f==0.5)*w
    e=lambda v: 100*abs(v-r['t'])/max(r['t'],0.05*C)
    rows.append((e(r['v']),e(area),e(step),e(med)))
    print(f"truth {r['t']:5.1f} value {r['v']:5.1f} ({e(r['v']):3.0f}%) area {area:5.2f} ({e(area):3.0f}%) step {step:5.2f} ({e(step):3.0f}%) isomed {med:5.2f} ({e(med):3.0f}%)")
for i,name in enumerate(['value','area','step','isomed']):
    v=sorted(x[i] for x in rows); print(name, 'median %.1f p90 %.1f max %.1f'%(st.median(v), v[int(0.9*(len(v)-1)+0.5)], v[-1]))

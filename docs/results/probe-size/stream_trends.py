import json,sys,statistics as st,math
def med(a): return st.median(a)
def verdict(o,sent):
    if (sent-len(o))/sent>0.1: return 'I',[0,0]
    g=max(2,int(math.sqrt(len(o)))); s=len(o)//g
    d=[med(o[i*s:(len(o) if i==g-1 else (i+1)*s)]) for i in range(g)]
    pct=sum(1 for a,b in zip(d,d[1:]) if b>a)/(g-1)
    tot=sum(abs(b-a) for a,b in zip(d,d[1:])); pdt=(d[-1]-d[0])/tot if tot else 0
    a='I' if pct>0.605 else ('N' if pct<0.495 else 'U'); b='I' if pdt>0.44 else ('N' if pdt<0.36 else 'U')
    if (a=='I' and b in 'IU') or (a=='U' and b=='I'): v='I'
    elif (a=='N' and b in 'NU') or (a=='U' and b=='N'): v='N'
    else: v='U'
    return v, d
for fn in sys.argv[1:]:
    cnt={'I':0,'N':0,'U':0}; rises=[]; exc=[]; floors=[]
    allo=[]
    for line in open(fn):
        t=json.loads(line); ps=[p for p in t['probes'] if p.get('rx_ns')]
        o=[(p['rx_ns']-p['tx_real_ns'])/1e3 for p in ps]
        allo.append(o)
    fl=min(min(o) for o in allo if o)
    for o in allo:
        v,d=verdict(o,50); cnt[v]+=1; rises.append(d[-1]-d[0]); exc.append(max(o)-fl); floors.append(min(o)-fl)
    rises.sort(); exc.sort(); floors.sort()
    q=lambda a,f:a[min(len(a)-1,int(f*len(a)))]
    print(f"{fn.split('/')[-1]:26s} I/N/U {cnt['I']:2d}/{cnt['N']:2d}/{cnt['U']:2d}  rise med {q(rises,.5):6.0f} p90 {q(rises,.9):6.0f}us  max-above-floor med {q(exc,.5):6.0f} p90 {q(exc,.9):6.0f}  min-above-floor med {q(floors,.5):5.0f} p90 {q(floors,.9):6.0f}")

"""Round 20: the search's stream noise (Evidence::noise) against whether the range held.

python3 docs/results/r20/noise_table.py docs/results/r20/noise-study.txt
"""
import re,sys,statistics as st
cell=None; rows=[]
lines=open(sys.argv[1]).read().splitlines()
i=0; cur=None
for l in lines:
    m=re.match(r'=== (\d+) (\S+)',l)
    if m: cell=(int(m.group(1)),m.group(2)); continue
    m=re.match(r'run \d+: (\S+) ([\d.]+) \[([\d.]+) ([\d.]+)\] conf ([\d.]+) truth ([\d.]+) err (\d+)%',l)
    if m:
        cur=dict(cell=cell,method=m.group(1),est=float(m.group(2)),lo=float(m.group(3)),hi=float(m.group(4)),conf=float(m.group(5)),truth=float(m.group(6)),err=int(m.group(7)))
        cur['held']=cur['lo']<=cur['truth']<=cur['hi']; rows.append(cur); continue
    m=re.search(r'noise: ([\d.eE+-]+|NaN)',l)
    if m and cur is not None: cur['noise']=float(m.group(1))
print('| C | cell | runs | noise median (min–max) | median err | held | slops runs held |')
print('|---:|---|---:|---|---:|---:|---:|')
cells=[]
for r in rows:
    if r['cell'] not in cells: cells.append(r['cell'])
for c in cells:
    rr=[r for r in rows if r['cell']==c]
    nz=[r.get('noise',float('nan')) for r in rr]
    sl=[r for r in rr if r['method']=='auto:slops']
    print('| %d | %s | %d | %.2f (%.2f–%.2f) | %d%% | %d/%d | %d/%d |'%(c[0],c[1],len(rr),st.median(nz),min(nz),max(nz),st.median([r['err'] for r in rr]),sum(r['held'] for r in rr),len(rr),sum(r['held'] for r in sl),len(sl)))
# threshold analysis: slops runs
for th in [0.5,0.75,1.0,1.5]:
    hi=[r for r in rows if r['method']=='auto:slops' and r.get('noise',0)>=th]
    lo=[r for r in rows if r['method']=='auto:slops' and r.get('noise',0)<th]
    print('threshold %.2f: slops runs at/above %d held %d (%s); below %d held %d'%(th,len(hi),sum(r['held'] for r in hi),sorted(set('%d %s'%r['cell'] for r in hi)),len(lo),sum(r['held'] for r in lo)))

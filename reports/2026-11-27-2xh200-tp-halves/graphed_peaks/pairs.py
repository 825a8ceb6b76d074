import json,glob,re,collections,statistics
import os; os.makedirs("/tmp/ga", exist_ok=True)
rows=[]
def load(f):
    try: d=json.load(open(f))
    except Exception: return None
    if not isinstance(d,dict) or 'benchmarks' not in d: return None
    return d
def entries(d):
    # returns dict run_name -> dict of counters (median or median over reps)
    agg={}; reps=collections.defaultdict(list)
    for b in d['benchmarks']:
        rn=b.get('run_name',b['name'])
        if b.get('run_type')=='aggregate':
            if b.get('aggregate_name')=='median': agg[rn]=b
        elif not b.get('error_occurred'):
            reps[rn].append(b)
    out={}
    for rn in set(agg)|set(reps):
        if rn in agg: out[rn]=(agg[rn],'median',reps.get(rn,[]))
        else:
            r=reps[rn]
            # median per numeric field
            m={}
            for k in r[0]:
                v=[x.get(k) for x in r]
                if all(isinstance(x,(int,float)) for x in v): m[k]=statistics.median(v)
                else: m[k]=r[0][k]
            out[rn]=(m,'reps%d'%len(r),r)
    return out
allpairs=[]
for f in sorted(glob.glob('reports/**/*.json',recursive=True)):
    d=load(f)
    if not d: continue
    E=entries(d)
    for rn,(g,kind,greps) in E.items():
        if '/graph:on' not in rn: continue
        en=rn.replace('/graph:on','')
        if en not in E: continue
        e,ekind,ereps=E[en]
        ndev=0
        while f'peak_mem_gib_dev{ndev}' in g or f'peak_mem_gib_dev{ndev}' in e: ndev+=1
        allpairs.append(dict(file=f,sha=d['context'].get('git_sha'),name=en,e=e,g=g,ekind=ekind,gkind=kind,ndev=ndev,ereps=ereps,greps=greps))
import pickle; pickle.dump(allpairs,open('/tmp/ga/pairs.pkl','wb'))
print(len(allpairs))
c=collections.Counter(p['file'] for p in allpairs)
for k,v in c.items(): print(v,k)

import pickle,collections,statistics as st
import numpy as np
R=pickle.load(open('/tmp/ga/rows.pkl','rb'))
print(len(R), collections.Counter(r['kind'] for r in R))
q=[]
for r in R:
    if 'base_g' in r:
        d=(r['base_g']-r['base_e'])*2**30
        if abs(d)>2**24: q.append(d/2**25)
q=np.array(q); print('dBase/32MiB', np.round(q[:60],3))
by=collections.defaultdict(list)
for r in R:
    if 'act_g' in r:
        s=r['name'].split('/')[0]; pos='first' if r['dev']==0 else ('last' if r['dev']==r['ndev']-1 else 'mid')
        by[(s,pos,r['kind'])].append(((r['act_g']-r['act_e'])*1024,(r['ms_g']-r['ms_e'])*1024,(r['base_g']-r['base_e'])*1024,r['exc']*1024))
for k,v in sorted(by.items()):
    a=np.array(v)
    print(k,len(v),'dAct med %.0f [%.0f,%.0f]'%(np.median(a[:,0]),a[:,0].min(),a[:,0].max()),'dMS med %.0f [%.0f,%.0f]'%(np.median(a[:,1]),a[:,1].min(),a[:,1].max()),'dBase med %.0f [%.0f,%.0f]'%(np.median(a[:,2]),a[:,2].min(),a[:,2].max()),'exc med %.0f [%.0f,%.0f]'%(np.median(a[:,3]),a[:,3].min(),a[:,3].max()))

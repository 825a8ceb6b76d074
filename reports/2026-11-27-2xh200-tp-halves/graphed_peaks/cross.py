import json,glob,os,collections,pickle,statistics
import sys
sys.path.insert(0,'/tmp/ga')
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)),'pairs.py')).read().split('allpairs=[]')[0])
bydir=collections.defaultdict(list)
for f in sorted(glob.glob('reports/**/*.json',recursive=True)):
    d=load(f)
    if not d: continue
    bydir[os.path.dirname(f)].append((f,d))
cross=[]
for dr,fl in bydir.items():
    for fg,dg in fl:
        Eg=entries(dg)
        for fe,de in fl:
            if fe==fg: continue
            if dg['context'].get('git_sha')!=de['context'].get('git_sha'): continue
            Ee=entries(de)
            for rn,(g,k,gr) in Eg.items():
                if '/graph:on' not in rn: continue
                en=rn.replace('/graph:on','')
                if en in Ee and en not in Eg:
                    e=Ee[en][0]
                    ndev=0
                    while f'peak_mem_gib_dev{ndev}' in g: ndev+=1
                    cross.append(dict(file=fg,efile=fe,sha=dg['context'].get('git_sha'),name=en,e=e,g=g,ndev=ndev))
pickle.dump(cross,open('/tmp/ga/cross.pkl','wb'))
print(len(cross))
for p in cross:
    e,g=p['e'],p['g']
    nm=p['name'].replace('train/','').replace('/manual_time','')
    s=[]
    for i in range(p['ndev']):
        k=f'peak_mem_gib_dev{i}'
        if k in e:
            pr=g.get(f'predicted_peak_gib_dev{i}')
            s.append(f"d{i}:{e[k]:.3f}->{g[k]:.3f} ({g[k]-e[k]:+.3f})"+(f" pr{pr:.2f}" if pr else ''))
    print(p['file'].replace('reports/',''),'<',os.path.basename(p['efile']),'|',nm,'|',' '.join(s))

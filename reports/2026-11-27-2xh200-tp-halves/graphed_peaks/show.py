import pickle,re
P=pickle.load(open('/tmp/ga/pairs.pkl','rb'))
n=0
for p in P:
    e,g=p['e'],p['g']
    if 'peak_mem_gib_dev0' not in e or 'peak_mem_gib_dev0' not in g: continue
    n+=1
    nm=p['name'].replace('train/','').replace('/manual_time','').replace('/real_time','')
    s=[]
    for i in range(p['ndev']):
        k=f'peak_mem_gib_dev{i}'
        if k in e and k in g:
            pr=g.get(f'predicted_peak_gib_dev{i}')
            s.append(f"d{i}:{e[k]:.3f}->{g[k]:.3f} ({g[k]-e[k]:+.3f})"+(f" pr{pr:.2f}" if pr else ''))
    print(p['file'].replace('reports/',''),'|',nm,'|',' '.join(s))
print(n)

import pickle,os,re,json
P=[dict(p,kind='same') for p in pickle.load(open('/tmp/ga/pairs.pkl','rb'))]+[dict(p,kind='cross') for p in pickle.load(open('/tmp/ga/cross.pkl','rb'))]
M=1024
rows=[]
seen=set()
for p in P:
    if 'before_after' in p['file'] or 'clocks_' in p['file']: continue
    e,g=p['e'],p['g']
    key=(p['file'],p.get('efile'),p['name'])
    if key in seen: continue
    seen.add(key)
    for i in range(p['ndev']):
        k=f'peak_mem_gib_dev{i}'
        if k not in e or k not in g: continue
        r=dict(file=p['file'].replace('reports/',''),efile=os.path.basename(p['efile']) if p.get('efile') else '',kind=p['kind'],sha=(p.get('sha') or '')[:7],
               name=p['name'].replace('train/','').replace('/manual_time',''),dev=i,ndev=p['ndev'],
               eager=e[k],graphed=g[k],exc=g[k]-e[k],pred=g.get(f'predicted_peak_gib_dev{i}'),pred_e=e.get(f'predicted_peak_gib_dev{i}'))
        if f'activation_mem_gib_dev{i}' in e and f'activation_mem_gib_dev{i}' in g:
            for t,b in (('e',e),('g',g)):
                r['ms_'+t]=b[f'model_state_mem_gib_dev{i}']; r['act_'+t]=b[f'activation_mem_gib_dev{i}']
                r['base_'+t]=b[k]-r['ms_'+t]-r['act_'+t]
                r['grad_'+t]=b.get(f'grad_mem_gib_dev{i}')
        rows.append(r)
pickle.dump(rows,open('/tmp/ga/rows.pkl','wb'))
print(len(rows))
for r in rows:
    if 'act_e' not in r: continue
    print("%-55s %-28s d%d exc=%+5.0f dBase=%+5.0f dMS=%+4.0f dAct=%+5.0f  act_e=%5.0f"%(r['file'][:55],r['efile'][:28],r['dev'],r['exc']*M,(r['base_g']-r['base_e'])*M,(r['ms_g']-r['ms_e'])*M,(r['act_g']-r['act_e'])*M,r['act_e']*M), re.sub(r'(resnet50|gpt2-medium)/|data:device/|precision:|/iterations:\d+|image:','',r['name'])[:80])

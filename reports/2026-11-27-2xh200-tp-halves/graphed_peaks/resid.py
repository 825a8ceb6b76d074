import pickle,os
P=pickle.load(open('/tmp/ga/pairs.pkl','rb'))+pickle.load(open('/tmp/ga/cross.pkl','rb'))
def r(b,i):
    try: return (b[f'peak_mem_gib_dev{i}']-b[f'model_state_mem_gib_dev{i}']-b[f'activation_mem_gib_dev{i}'])*1024
    except KeyError: return None
seen=set()
for p in P:
    if 'before_after' in p['file']: continue
    e,g=p['e'],p['g']
    if f'activation_mem_gib_dev0' not in g or 'activation_mem_gib_dev0' not in e: continue
    key=(p['file'],p.get('efile'),p['name'])
    if key in seen: continue
    seen.add(key)
    nm=p['name'].replace('train/','').replace('/manual_time','').replace('/data:device','').replace('precision:','')
    out=[]
    for i in range(p['ndev']):
        out.append("d%d exc=%+.0f base(e)=%.0f base(g)=%.0f ms(e/g)=%.0f/%.0f act(e/g)=%.0f/%.0f"%(i,(g[f'peak_mem_gib_dev{i}']-e[f'peak_mem_gib_dev{i}'])*1024,r(e,i),r(g,i),e[f'model_state_mem_gib_dev{i}']*1024,g[f'model_state_mem_gib_dev{i}']*1024,e[f'activation_mem_gib_dev{i}']*1024,g[f'activation_mem_gib_dev{i}']*1024))
    print(p['file'].replace('reports/',''),('<'+os.path.basename(p['efile'])) if p.get('efile') else '', nm)
    for o in out: print('    ',o)

import pickle,re
R=pickle.load(open('/tmp/ga/rows.pkl','rb'))
def short(n):
    n=re.sub(r'/data:device|/iterations:\d+|/manual_time|precision:|image:|batch:|seq:|/bucket_mib:25|/overlap:on|/replicate:broadcast','',n)
    return n.replace('resnet50','rn50').replace('gpt2-medium','gpt2m').replace('gpt2-small','gpt2s').replace('schedule:','').replace('/chunks:2','x2').replace('optimizer:','').replace('checkpoint:blocks','ckpt')
def f(x,fmt='%.3f'): return fmt%x if x is not None else '-'
out=[]
for kind,title in (('same','Same-file pairs (eager and graphed in one parbench process)'),('cross','Cross-file pairs (same call directory and binary, eager and graphed in separate processes)')):
    rows=[r for r in R if r['kind']==kind]
    rows.sort(key=lambda r:(r['file'],r['efile'],r['name'],r['dev']))
    out.append(f'\n#### {title}: {len(rows)} device rows\n')
    out.append('| file | eager file | case | dev | eager GiB | graphed GiB | excess GiB | predicted GiB (graphed case) | dBase MiB | dModelState MiB | dAct MiB |')
    out.append('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        d=lambda a,b: f((r[a]-r[b])*1024,'%+.0f') if a in r else '-'
        out.append('| %s | %s | %s | %d | %.3f | %.3f | %+.3f | %s | %s | %s | %s |'%(r['file'],r['efile'] or '(same)',short(r['name']),r['dev'],r['eager'],r['graphed'],r['exc'],f(r['pred'],'%.2f'),d('base_g','base_e'),d('ms_g','ms_e'),d('act_g','act_e')))
open('/tmp/ga/tables.md','w').write('\n'.join(out)+'\n')
print(len(out))

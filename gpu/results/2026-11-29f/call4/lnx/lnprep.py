import sys, os, json, subprocess, re
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0,'/work/main')
from agent_core.source.cuda_parse import parse_cuda
from agent_core.source import spec as S
from agent_core.templating import experts as X
from agent_core.templating.experts.library import load_library
lib = load_library()
OUT='/work/main/.gpu/g/lnx'
cases = {
 'lc0': ('bench/corpus/layer_norm/layer_norm_bias_act_alpha_skip_16_per_thread_uint4_block_32_y_z_rows_smem_partials_d_div_sqrt_var_ep_fp16_lc0.cu','layer_norm_kernel',
   [(128,1,8,1,0,0),(128,1,8,1,1,0),(128,1,8,1,0,16),(128,1,8,1,1,16),(128,2,8,1,0,0),(128,4,8,1,0,0),(128,8,8,1,0,0),(128,4,8,1,0,4),(64,1,8,2,0,0),(64,1,8,2,0,32),(64,1,8,2,0,16),(256,1,4,1,0,0),(256,1,4,1,0,8)]),
 'bt': ('bench/corpus/layer_norm/add_bias_input_layernorm_v2_ite4_half2_fp32_gamma_void_ptr_fixed_eps_fp16_bytetransformer.cu','add_bias_input_layernorm_v2',
   [(1024,1,4,4,1,0),(512,1,8,1,0,0),(512,1,8,1,1,0),(512,1,8,1,0,4),(256,1,8,2,0,0),(256,1,8,2,1,0),(256,1,8,2,0,8),(256,1,8,2,0,4),(128,1,8,4,0,0),(128,1,8,4,1,0),(128,1,8,4,0,16),(128,1,8,4,0,8),(128,1,8,4,0,4)]),
}
man=[]; jobs=[]
old={m['tag']:m['regs'] for m in json.load(open(OUT+'/manifest.json'))} if os.path.exists(OUT+'/manifest.json') else {}
for name,(path,k,cfgs) in cases.items():
    cf=parse_cuda(open('/work/main/'+path).read(), path); spec=S.find_spec(cf,k)
    b=[b for b in X.candidates(cf,k,spec,lib) if b.expert.name=='layer_norm'][0]
    t=X.bind(b,cf,spec)
    text=t.text.replace('__launch_bounds__((KT_THREADS * KT_ROWS))','__launch_bounds__((KT_THREADS * KT_ROWS), KT_MINB)')
    src=f'{OUT}/{name}.cu'; open(src,'w').write(text)
    open(f'{OUT}/{name}_plain.cu','w').write(t.text)
    for c in cfgs:
        T,R,V,I,W,M=c
        tag=f'{name}_T{T}_R{R}_V{V}_I{I}_W{W}_M{M}'
        jobs.append((src if M else f'{OUT}/{name}_plain.cu',tag,c))
        man.append(dict(case=name,tag=tag,entry=t.entry,cfg=dict(THREADS=T,ROWS=R,VEC=V,ITEMS=I,WLOAD=W,MINB=M)))
def comp(j):
    src,tag,(T,R,V,I,W,M)=j
    if os.path.exists(f'{OUT}/{tag}.cubin') and tag in old: return tag,0,old[tag],''
    r=subprocess.run(['/usr/local/cuda/bin/nvcc','-arch=sm_90','-cubin','-O3','-o',f'{OUT}/{tag}.cubin',src,f'-DKT_THREADS={T}',f'-DKT_ROWS={R}',f'-DKT_VEC={V}',f'-DKT_ITEMS={I}',f'-DKT_WLOAD={W}',f'-DKT_MINB={M if M else 1}','-w','-Xptxas','-v'],capture_output=True,text=True)
    regs=re.findall(r'Used (\d+) registers',r.stderr)
    return tag,r.returncode,regs[-1] if regs else None, r.stderr[-300:] if r.returncode else ''
with ThreadPoolExecutor(2) as ex:
    res=list(ex.map(comp,jobs))
for m,(tag,rc,regs,err) in zip(man,res):
    m['regs']=regs; print(tag,rc,regs,err)
json.dump(man,open(f'{OUT}/manifest.json','w'),indent=1)

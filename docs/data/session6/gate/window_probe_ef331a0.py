import json,sys,numpy as np
from nnbench import measure
from nnbench.runtime import open_backend
from nnbench.suites import gemm
be,_=open_backend("cuda");sh=gemm.Shape(2048,2048,2048)
cs=gemm.plan(["vectorized","warptile"],{},be.device);cp=gemm.WORKLOAD.compile(be.arch,cs)
r=np.random.default_rng(1);bufs=[be.upload(r.standard_normal((2048,2048)).astype(np.float32)) for _ in range(3)];p=[be.ptr(b) for b in bufs]
L={c.variant.name:gemm.gemm_launch(be,be.load(cp[c],c.variant.kernel),c.variant,c.param_dict,sh,*p)[0](1.0,0.0) for c in cs}
out=[]
for n in (20,200):
  T=measure.TimingSettings(budget_s=0.25 if n==20 else 2.0,min_samples=n,max_noise=0.01,min_sample_ms=0.5)
  for i in range(30 if n==20 else 10):
    for v,l in L.items():
      s=measure.measure(be,l,T);out.append(dict(n=n,i=i,v=v,m=s.median_ms,k=s.samples,reps=s.reps,sm=s.sm_clock_mhz,smp=s.samples_ms))
json.dump(out,open(sys.argv[1],"w"))
for n in (20,200):
  for v in L:
    m=np.array([o["m"] for o in out if o["n"]==n and o["v"]==v]);print(n,v,"rsd %.2f%%"%(100*m.std(ddof=1)/m.mean()),np.round(100*(m/np.median(m)-1),1).tolist())

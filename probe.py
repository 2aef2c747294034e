import sys
import time

from nnbench import config, paths
from nnbench.runtime.cuda import CudaBackend
from nnbench.suites import gemm

be = CudaBackend(0)
spec = config.load_sweep(paths.CONFIGS / "ci.yaml")
sess = gemm.Session(be, spec.settings, spec.rtol, 1, {})
sess.warm_up()
comp = gemm.compile_cases(be.arch, spec.cases)
shape = gemm.Shape(2048, 2048, 2048)
sess.buffers(shape)
for c in spec.cases:
    sess.run_case(c, shape, comp[c])


def run(label):
    t = time.perf_counter()
    g = 0.0
    for c in spec.cases * 3:
        g += sess.run_case(c, shape, comp[c])["gpu_ms"]
    print(label, "wall ms %.0f gpu ms %.0f" % ((time.perf_counter() - t) * 1e3, g), flush=True)


run("alone")
sess.prefetch(gemm.Shape(4096, 4096, 4096))
run("with 4096 prefetch")
sess._next = None
sess.prefetch(gemm.Shape(4095, 4096, 4096))
t = time.perf_counter(); sess._next[1].result(); print("prefetch alone s", time.perf_counter() - t)
sys.setswitchinterval(0.0002)
sess._next = None
sess.prefetch(gemm.Shape(4096, 4095, 4096))
run("with prefetch, switch 0.2 ms")

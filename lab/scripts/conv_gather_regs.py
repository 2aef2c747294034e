"""Conv steps 9 and 10 with the gather's registers (GATHER_REGS, a -D of kernels_cu/conv/implicit_wgmma.cuh)
at 40 and 88, on the resnet layers: the forward and the backward's two gradients timed apart.

Not the CLI: GATHER_REGS is a build switch of the experiment behind the kernels' default, not a
registry parameter, and the backward's two gradients are timed alone (the suite times the pass). The timing
loop is conv_producers.py's (which takes any -D since); its rows now print the forward's IQR and path too."""

from conv_producers import time_builds

from nnbench import measure
from nnbench.runtime.cuda import CudaBackend


def main() -> None:
    fcombos = [dict(BN=bn, GATHER_REGS=g) for bn in (64, 128) for g in (40, 88)]
    bcombos = [dict(BM=bm, BN=bn, GATHER_REGS=g) for bm, bn in ((128, 128), (64, 128)) for g in (40, 88)]
    time_builds(CudaBackend(), measure.TimingSettings(budget_s=0.1), fcombos, bcombos)


if __name__ == "__main__":
    main()

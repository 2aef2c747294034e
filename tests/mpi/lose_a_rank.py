"""A sweep under MPI that loses a rank: started by tests/test_search.py as
`mpirun --enable-recovery -np 3 python -m mpi4py.futures tests/mpi/lose_a_rank.py MARKER SWEEP-ARGS...`.

Rank 0 runs `nnbench sweep SWEEP-ARGS --mpi` with every job going through `dying_run`: the first job
that reaches a rank while MARKER does not exist kills that rank's process at once (no answer, no
exception: as if its node were gone); every other job runs as usual. Worker ranks import this module
by name (tests/mpi on PYTHONPATH) to unpickle `dying_run`."""

import os
import sys


def dying_run(init, job, watchdog_s):
    from nnbench.sweeps.pool import remote_run
    marker = os.environ["NNBENCH_TEST_LOSE_MARKER"]
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return remote_run(init, job, watchdog_s)
    os._exit(9)


if __name__ == "__main__":
    import lose_a_rank

    from nnbench.cli import main
    from nnbench.sweeps import pool

    pool.remote_run = lose_a_rank.dying_run  # what rank 0 submits; the ranks look it up by name
    sys.argv = ["nnbench", "sweep", *sys.argv[1:], "--mpi"]
    main()

from nnbench.cli import main

if __name__ == "__main__":  # not when imported as __mp_main__ by an mpi4py.futures worker rank
    main()

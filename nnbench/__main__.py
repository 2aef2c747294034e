from nnbench.cli import main

main()

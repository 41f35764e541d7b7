"""``python -m loadgen.cli``: the same command line as the ``loadgen`` script."""

from loadgen.cli import main

main()

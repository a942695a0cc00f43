"""``python -m callgate``: the same command as the ``callgate`` script."""

from callgate.cli import main

main()

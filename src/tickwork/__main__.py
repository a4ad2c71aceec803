"""``python -m tickwork``: the same CLI as the ``tickwork`` command."""

from tickwork.cli import main

main()

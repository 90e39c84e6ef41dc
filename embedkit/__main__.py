"""``python -m embedkit``: the same CLI as the ``embedkit`` command."""

from embedkit.cli import main

main()

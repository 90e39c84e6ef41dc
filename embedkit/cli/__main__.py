"""``python -m embedkit.cli`` (and ``torchrun -m embedkit.cli``) run the embedkit command."""

from embedkit.cli import main

main()

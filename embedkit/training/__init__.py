"""What ``train`` and ``pretrain`` share: the base settings, the Trainer arguments, the run folder and the dev-set
evaluator (a layer below both, so neither imports the other)."""

"""Checkpointed groups, restarted from their newest complete cut after a
failure (docs/recovery.md): the driver of a fixed group
(:mod:`.checkpointed`), a join rank's checkpoints (:mod:`.join`) and a
live-scalable group that takes checkpoints (:mod:`.live`)."""

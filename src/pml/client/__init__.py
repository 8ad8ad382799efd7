"""``pml connect``: the local runner's durable trace queue and the syncer that reports runs."""

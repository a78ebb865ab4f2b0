"""The `ray` engine: the gang lifecycle with every task a Ray actor pinned to its node."""

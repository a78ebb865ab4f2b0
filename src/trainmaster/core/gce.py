"""Google Compute Engine's published preemptible-VM figures, apart from `core.market` so the CLI's help can
show them without loading pydantic (every CLI call builds every parser)."""

GCE_NOTICE = 30.0  # seconds of warning GCE gives before it stops a preemptible VM
GCE_MAX_LIFETIME = 24 * 3600.0  # GCE stops every preemptible VM after 24 hours
GCE_BOOT_DELAY = 90.0  # seconds from request to a GPU VM that runs tasks (measured ~1-2 min; an assumption)

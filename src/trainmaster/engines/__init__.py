"""Engines execute actions and report events: `sim`, `local` (and later `ray`)."""

"""The discrete-event simulator: an engine with a virtual clock."""

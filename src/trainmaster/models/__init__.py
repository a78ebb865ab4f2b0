"""Online models of job speed and convergence (Optimus)."""

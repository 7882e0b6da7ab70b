"""Partitions and worker processes: one HTTP port, several engines (docs/architecture.md,
"Partitions and workers"). With one partition (the default) none of this runs."""

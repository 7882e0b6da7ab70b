"""Partitions and worker processes: one HTTP port, several engines (docs/architecture.md,
"Partitions and workers"). A data dir of one partition (a machine of one core, or
ROCKTIMER_WORKERS=1) runs none of this."""

"""Files: atomic writes, checkpoints, histories, whole-agent saves, locks, damage checks, and exports."""

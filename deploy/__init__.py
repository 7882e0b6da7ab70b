"""Container deployment: the lock files the images install from and the compose smoke test."""

"""Replay: the rollout and replay buffers, prioritised replay, hindsight relabelling, and their saved state."""

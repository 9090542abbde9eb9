"""Shared helpers: environments, cfg models, buffers, history, CLI tables and tuning."""

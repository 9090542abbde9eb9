"""Environments: making and vectorising them, checking what they give (observations, masks, spaces), the envs xagents registers, and each env id's tuned presets."""

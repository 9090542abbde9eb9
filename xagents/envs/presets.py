"""Tuned defaults: each agent's ``hyperparameters.json`` maps ``default``, ``atari`` and env ids to settings."""
from __future__ import annotations

import importlib.resources
import json

from xagents.envs.creation import is_atari


def read_presets(package: str, env_id: str) -> dict:
    """The settings tuned for ``env_id`` in ``package``'s ``hyperparameters.json`` (``xagents.ppo``).

    ``default`` applies to every env, ``atari`` to ALE ids, then the env's own entry (an id given with its module,
    ``gymnasium_robotics:FetchReach-v4``, by the id alone); later entries override earlier ones (and explicit
    arguments override them all). The file is read as a
    resource beside the package, without importing it (and TensorFlow with it).
    """
    root, *inner = package.split('.')
    try:
        text = importlib.resources.files(root).joinpath(*inner, 'hyperparameters.json').read_text()
    except FileNotFoundError:
        return {}
    table = json.loads(text)
    values = dict(table.get('default', {}))
    if is_atari(env_id):
        values.update(table.get('atari', {}))
    values.update(table.get(env_id.rpartition(':')[2], {}))
    return values


def names_env(package: str, env_id: str) -> bool:
    """Whether ``package``'s ``hyperparameters.json`` has settings of its own for ``env_id`` (its entry, or
    ``atari`` for an ALE id): else the agent runs on its generic defaults."""
    root, *inner = package.split('.')
    try:
        table = json.loads(importlib.resources.files(root).joinpath(*inner, 'hyperparameters.json').read_text())
    except FileNotFoundError:
        return False
    return env_id.rpartition(':')[2] in table or (is_atari(env_id) and 'atari' in table)

"""Checkpoints: one file per model holding its weights, its optimizer's state and counters.

Files are NumPy ``.npz`` archives written atomically (any name works, e.g. ``ppo-cartpole.tf``):
a kill while saving leaves the previous checkpoint readable.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np
import tensorflow as tf

from xagents.utils.atomic import atomic_write


def save_checkpoint(path: str, model: tf.keras.Model, optimizer=None,
                    extras: dict[str, np.ndarray] | None = None, **counters: int) -> None:
    """Save ``model``'s weights, ``optimizer``'s variables (if any), named ``extras`` arrays (such
    as observation statistics) and integer counters."""
    arrays = {f'model/{i}': weight.numpy() for i, weight in enumerate(model.weights)}
    arrays.update({f'extra/{name}': np.asarray(value) for name, value in (extras or {}).items()})
    if optimizer is not None:
        arrays.update({f'optimizer/{i}': v.numpy() for i, v in enumerate(optimizer.variables)})
    arrays.update({f'counter/{name}': np.asarray(value) for name, value in counters.items()})
    with atomic_write(path) as file:
        np.savez(file, **arrays)


def load_checkpoint(path: str, model: tf.keras.Model, optimizer=None) -> dict[str, np.ndarray]:
    """Restore what :func:`save_checkpoint` wrote into ``model`` (and ``optimizer``); return extras.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a checkpoint or does not fit ``model``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'weights file not found: {path}')
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = dict(archive)
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ValueError(f'{path} is not an xagents checkpoint') from None
    _assign(path, 'model', model.weights, arrays)
    if optimizer is not None and any(key.startswith('optimizer/') for key in arrays):
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        _assign(path, 'optimizer', optimizer.variables, arrays)
    return {key.split('/', 1)[1]: value for key, value in arrays.items() if key.startswith('extra/')}


def _assign(path: str, prefix: str, variables, arrays: dict[str, np.ndarray]) -> None:
    saved = [arrays[key] for key in sorted((k for k in arrays if k.startswith(prefix + '/')),
                                           key=lambda k: int(k.split('/')[1]))]
    expected = [tuple(variable.shape) for variable in variables]
    got = [value.shape for value in saved]
    if expected != got:
        raise ValueError(
            f'{path} does not fit this {prefix}: expected {len(expected)} arrays shaped '
            f'{expected[:4]}{"..." if len(expected) > 4 else ""}, got {len(got)} shaped '
            f'{got[:4]}{"..." if len(got) > 4 else ""}'
        )
    for variable, value in zip(variables, saved):
        variable.assign(value)

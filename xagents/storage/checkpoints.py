"""Checkpoints: one file per model holding its weights, its optimizer's state, counters and its origin.

Files are NumPy ``.npz`` archives written atomically (any name works, e.g. ``ppo-cartpole.tf``):
a kill while saving leaves the previous checkpoint readable. Each records which agent, env and
spaces it was trained for, so another run's weights are refused rather than loaded.
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import numpy as np

from xagents.storage.atomic import atomic_write
from xagents.storage.readback import damaged, read_arrays

if TYPE_CHECKING:  # (a checkpoint is read and written without Keras: the tuner imports this before a backend is chosen)
    import keras

# Saved last: a checkpoint whose archive lost its last entries (a damaged zip directory) lacks it.
LAST_ENTRY = 'counter/steps'


def checkpoint_arrays(path: str, model: keras.Model, optimizer=None, extras: dict[str, np.ndarray] | None = None,
                      identity: dict[str, str] | None = None, **counters: int) -> dict[str, np.ndarray]:
    """What a checkpoint at ``path`` holds, copied now: ``model``'s weights, ``optimizer``'s variables (if any),
    named ``extras`` arrays (such as observation statistics), the run's ``identity`` (agent, env, spaces) and
    integer counters.

    Raises:
        NonFiniteError: a value is nan or infinite (the last good file at ``path`` is never replaced by it).
    """
    arrays = {f'model/{i}': weight.numpy() for i, weight in enumerate(model.weights)}
    arrays.update({f'extra/{name}': np.asarray(value) for name, value in (extras or {}).items()})
    arrays.update({f'identity/{name}': np.asarray(value) for name, value in (identity or {}).items()
                   if value is not None})
    if optimizer is not None:
        arrays.update({f'optimizer/{i}': v.numpy() for i, v in enumerate(optimizer.variables)})
    arrays.update({f'counter/{name}': np.asarray(value) for name, value in counters.items()})  # LAST_ENTRY last
    for name, value in arrays.items():
        if value.dtype.kind == 'f' and not np.isfinite(value).all():
            raise NonFiniteError(f'refused to write {path}: {name} holds non-finite values (nan or inf)')
    return arrays


def write_checkpoint(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write the arrays of :func:`checkpoint_arrays` to ``path``, atomically."""
    with atomic_write(path) as file:
        np.savez(file, **arrays)


def save_checkpoint(path: str, model: keras.Model, optimizer=None,
                    extras: dict[str, np.ndarray] | None = None, identity: dict[str, str] | None = None,
                    **counters: int) -> None:
    """Save ``model`` (see :func:`checkpoint_arrays`) to ``path`` now."""
    write_checkpoint(path, checkpoint_arrays(path, model, optimizer, extras, identity, **counters))


class NonFiniteError(ArithmeticError):
    """Training produced a non-finite number (weights, a loss): the run stops, and the files on disk stay those
    of the last good point."""


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint file's arrays, read but not yet restored into a model."""

    path: str
    arrays: dict[str, np.ndarray]

    def _section(self, prefix: str) -> dict[str, np.ndarray]:
        return {key.split('/', 1)[1]: value for key, value in self.arrays.items() if key.startswith(prefix + '/')}

    @property
    def identity(self) -> dict[str, str]:
        """What it was trained for: ``agent``, ``env_id``, spaces (empty for files of older versions)."""
        return {name: str(value) for name, value in self._section('identity').items()}

    @property
    def steps(self) -> int | None:
        counters = self._section('counter')
        return int(counters['steps']) if 'steps' in counters else None

    @property
    def extras(self) -> dict[str, np.ndarray]:
        return self._section('extra')

    def restore(self, model: keras.Model, optimizer=None) -> None:
        """Assign the weights to ``model`` (and the state to ``optimizer``).

        Raises:
            ValueError: the arrays do not fit ``model`` or ``optimizer``.
        """
        _assign(self.path, 'model', model.weights, self.arrays)
        if optimizer is not None and any(key.startswith('optimizer/') for key in self.arrays):
            if not optimizer.built:
                optimizer.build(model.trainable_variables)
            _assign(self.path, 'optimizer', optimizer.variables, self.arrays)


def read_checkpoint(path: str, fix: str = 'use a copy of it, or train anew') -> Checkpoint:
    """Read what :func:`save_checkpoint` wrote; ``fix`` ends the message if the file is damaged.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is damaged (truncated, a byte changed) or is not a checkpoint.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'weights file not found: {path}')
    with open(path, 'rb') as file:
        if file.read(2) != b'PK':  # how every zip archive starts: any other file is no checkpoint, not a damaged one
            raise ValueError(f'{path} is not an xagents checkpoint')
    arrays = read_arrays(path, fix)
    if not any(key.startswith('model/') for key in arrays):
        raise ValueError(f'{path} is not an xagents checkpoint')
    if LAST_ENTRY not in arrays:
        raise damaged(path, f'its archive lacks {LAST_ENTRY}, the last array a checkpoint holds', fix)
    return Checkpoint(path, arrays)


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

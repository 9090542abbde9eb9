"""A replay buffer's whole state as named arrays (what ``agent.save(include_buffer=True)`` writes), and back."""
from __future__ import annotations

import json

import numpy as np


# Beside a saved array: its shape before its last, repeated rows were left out, and that row.
SHAPE, FILL = '#shape', '#fill'


def _rows_before_repeats(value: np.ndarray, block: int = 4096) -> int:
    """How many leading rows of ``value`` to keep: all but the run of rows at the end equal to the last one.
    Scanned from the end a block at a time, so an Atari frame store needs no array of its size."""
    rows, end = value.reshape(len(value), -1), len(value)
    while end > 0:
        start = max(0, end - block)
        differs = np.flatnonzero((rows[start:end] != rows[-1]).any(axis=1))
        if len(differs):
            return start + int(differs[-1]) + 1
        end = start
    return 0


def buffer_state(buffer) -> dict[str, np.ndarray]:
    """Everything a replay buffer holds and counts, as named arrays (what ``agent.save(include_buffer=True)``
    writes): its arrays and counters, those of its storage and sum tree, and its sampler's state."""
    state = {'rng': np.asarray(json.dumps(buffer.rng.bit_generator.state))}
    for key, (owner, name) in fields(buffer).items():
        value = getattr(owner, name)
        if isinstance(value, np.ndarray) and value.ndim and len(value):
            # The rows after the last one that differs from the final row (a buffer's unwritten rows
            # still hold their initial value) are saved as that row and a shape, not as bytes: a buffer
            # that is still filling costs what it holds.
            state[key] = value[:_rows_before_repeats(value)]
            state[key + SHAPE] = np.asarray(value.shape)
            state[key + FILL] = value[-1]
        else:
            state[key] = np.asarray(value)
    return state


def restore_buffer_state(buffer, state: dict[str, np.ndarray], source: str = 'the saved replay buffer') -> None:
    """Take back what :func:`buffer_state` gave, into a buffer built with the same settings.

    Args:
        buffer: The buffer to fill.
        state: What :func:`buffer_state` gave.
        source: Where ``state`` was read, as error messages name it.

    Raises:
        ValueError: the saved arrays do not fit this buffer (another capacity, env count or space), or some
            are missing or unknown to it (a damaged file, or one of another kind of buffer).
    """
    for name in buffer.lazy_arrays:  # arrays the buffer allocates on first use, saved once it had
        key = f'buffer/{name}'
        if key in state and getattr(buffer, name) is None:
            shape = tuple(state[key + SHAPE]) if key + SHAPE in state else state[key].shape
            setattr(buffer, name, np.zeros(shape, state[key].dtype))
    saved = fields(buffer)
    missing = [key for key in ['rng', *saved] if key not in state]
    missing += [key + FILL for key in saved if key + SHAPE in state and key + FILL not in state]
    unknown = [key for key in state if key != 'rng' and key.partition('#')[0] not in saved]
    if missing or unknown:
        raise ValueError(f'{source} does not hold this replay buffer\'s state: '
                         + (f'{missing[0]} is missing' if missing else f'{unknown[0]} is none of its arrays')
                         + ' (a damaged file, or one saved by another kind of buffer)')
    for key, (owner, name) in saved.items():  # check everything before changing anything
        current, value = getattr(owner, name), state[key]
        shape = tuple(state[key + SHAPE]) if key + SHAPE in state else value.shape  # older saves: whole arrays
        if isinstance(current, np.ndarray) and (current.shape != shape or current.dtype != value.dtype):
            raise ValueError(f'{source} does not fit this replay buffer: {name} is {shape} '
                             f'{value.dtype}, expected {current.shape} {current.dtype}')
    for key, (owner, name) in saved.items():
        value, current = state[key], getattr(owner, name)
        if isinstance(current, np.ndarray):
            current[:len(value)] = value
            if len(value) < len(current):
                current[len(value):] = state[key + FILL]
        else:
            setattr(owner, name, type(current)(value))
    buffer.rng.bit_generator.state = json.loads(str(state['rng']))


def fields(buffer) -> dict[str, tuple[object, str]]:
    """What :func:`buffer_state` saves, by key (``part/attribute``): the owner and attribute name of
    every array and number of the buffer's stateful parts."""
    return {f'{prefix}/{name}': (owner, name) for prefix, owner in _stateful_parts(buffer).items()
            for name, value in vars(owner).items()
            if isinstance(value, (np.ndarray, int, float, np.integer, np.floating))}


def _stateful_parts(buffer) -> dict[str, object]:
    """The buffer and the objects of xagents' buffer modules it holds (frame or observation store, sum tree)."""
    parts = {'buffer': buffer}
    parts.update({name: value for name, value in vars(buffer).items() if _is_part(value)})
    for name, part in list(parts.items())[1:]:  # a Dict observation store's per-key stores
        for attribute, value in vars(part).items():
            if isinstance(value, dict):
                parts.update({f'{name}.{attribute}.{key}': each for key, each in value.items() if _is_part(each)})
    return parts


def _is_part(value) -> bool:
    return type(value).__module__.startswith('xagents.replay.') and hasattr(value, '__dict__')

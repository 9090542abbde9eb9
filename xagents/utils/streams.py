"""The NumPy random streams of an agent, one per purpose, shared with no env."""
from __future__ import annotations

import numpy as np

ACTING, REPLAY = 1, 2  # purposes of an agent's NumPy random streams


def random_stream(seed: int | None, purpose: int, *more: int) -> np.random.Generator:
    """The NumPy generator an agent seeded with ``seed`` uses for ``purpose``.

    Gymnasium seeds env ``i`` with ``default_rng(seed + i)``: an agent drawing from
    ``default_rng(seed)`` would repeat env 0's draws (its reset states) in its own actions. Streams
    keyed by ``[seed, purpose]`` are shared with no env and with no other purpose.
    """
    return np.random.default_rng(None if seed is None else [seed, purpose, *more])

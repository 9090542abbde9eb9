"""Refuse, before allocating, what cannot fit in this machine's memory (instead of a hang or a kill)."""
from __future__ import annotations

# What one Atari game holds once made and stepped; ALE allocates it in C++, out of tracemalloc's sight. The process's
# RSS grew by 1.6-1.7 MiB a game over 16, 64 and 256 games of PongNoFrameskip-v4, in ale-py's C++ vector env and
# through Gymnasium's Python wrappers alike (ale-py 0.12.1, Gymnasium 1.4, 2-core Linux); counted as 2 MiB.
ALE_GAME_BYTES = 2 * 2 ** 20


def available_bytes() -> int | None:
    """Memory the system can give without swapping (Linux ``MemAvailable``); None where unknown."""
    try:
        with open('/proc/meminfo') as meminfo:
            for line in meminfo:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def gib(nbytes: float) -> str:
    return f'{nbytes / 2 ** 30:,.1f} GiB'


def check_fits(what: str, nbytes: float, fix: str) -> None:
    """Raise a ValueError naming ``what``, the memory it needs and ``fix`` if it exceeds what is available."""
    available = available_bytes()
    if available is not None and nbytes > available:
        raise ValueError(f'{what} needs {gib(nbytes)} of memory, {gib(available)} is available: {fix}')


def check_quantile_pairs(sizes: str, batch: int, estimates: int, targets: int, fix: str) -> None:
    """Refuse quantile sizes whose loss cannot fit (before a network is built): the quantile Huber loss holds a
    float32 for every (transition, estimate, target) triple of a batch, three times over (the errors, their weighted
    Huber loss and its gradient)."""
    check_fits(f'{sizes}: a loss over {estimates:,} quantile estimates x {targets:,} targets for each of '
               f'{batch:,} transitions', 12 * batch * estimates * targets, fix)

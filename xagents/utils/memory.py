"""Refuse, before allocating, what cannot fit in this machine's memory (instead of a hang or a kill)."""
from __future__ import annotations


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

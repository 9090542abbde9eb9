"""One live run per output: an advisory lock (``flock``) beside each file or folder that a run writes.

A run takes the lock of each of its outputs before it writes anything and holds it until it ends; a run
that asks for an output another live run holds is refused at once, with the holder's pid, which the lock
file records. The kernel drops a process's locks when the process dies, SIGKILL included, so a killed run never
leaves an output locked.

The lock of ``folder/name`` is the file ``folder/.name.lock``. A run removes it when it ends, before
letting go of it; a run that has just taken a lock checks that the file it locked is still the one at that
path (else it was removed in between, and it takes the new one), so removing it is safe. A killed run
leaves its lock file behind, unlocked: the next run on that output takes it over and removes it.

Where ``fcntl`` is missing (Windows), outputs are not locked.
"""
from __future__ import annotations

import contextlib
import os
from typing import Sequence

try:
    import fcntl
except ImportError:  # not a POSIX system
    fcntl = None

_held: set[int] = set()  # descriptors of the locks this process holds


def _forget_in_child() -> None:
    """A forked child (an async env worker, say) shares its parent's locks: it lets go of its copies, so that
    a child outliving a killed run does not keep the run's outputs locked."""
    for descriptor in _held:
        os.close(descriptor)
    _held.clear()


if fcntl is not None:
    os.register_at_fork(after_in_child=_forget_in_child)


def lock_path(path: str) -> str:
    """The lock file of output ``path``: ``.name.lock`` beside it (symbolic links resolved)."""
    real = os.path.realpath(path)
    return os.path.join(os.path.dirname(real), f'.{os.path.basename(real)}.lock')


class OutputLocks:
    """The locks of one run's outputs, taken by :func:`lock_outputs`; :meth:`release` lets them all go."""

    def __init__(self) -> None:
        self.held: list[tuple[str, int]] = []  # (lock file, descriptor)
        self.made: list[str] = []  # folders made for lock files

    def take(self, label: str, path: str) -> None:
        """Lock output ``path`` (called ``label`` in the error), making its folder if missing.

        Raises:
            ValueError: another live run holds it, or its lock cannot be written (a full disk): naming ``path``.
        """
        try:
            self._take(label, path)
        except OSError as error:
            raise ValueError(f'cannot write {path}: {error.strerror}') from None

    def _take(self, label: str, path: str) -> None:
        lock = lock_path(path)
        while True:  # until the file locked is the one at ``lock``: another run may remove it meanwhile
            folder, missing = os.path.dirname(lock), []
            while not os.path.isdir(folder):
                missing.append(folder)
                folder = os.path.dirname(folder)
            if missing:
                os.makedirs(missing[0], exist_ok=True)
                self.made += missing
            try:
                descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            except FileNotFoundError:  # a folder made for another run's lock file, removed as that run ended
                continue
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(descriptor, 20).decode(errors='replace').strip()
                os.close(descriptor)
                raise ValueError(f'{label} {path} is in use by another run{f" (pid {holder})" if holder else ""}: '
                                 'wait until it ends, or choose another path') from None
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(descriptor), os.stat(lock)):
                    break
            os.close(descriptor)
        _held.add(descriptor)
        self.held.append((lock, descriptor))
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f'{os.getpid()}\n'.encode())

    def release(self) -> None:
        """Remove the lock files (each while still locked) and the folders made for them if left empty, then
        let go of the locks."""
        for lock, descriptor in self.held:
            if descriptor in _held:  # not in a forked child, which let go of its copies
                with contextlib.suppress(OSError):
                    os.remove(lock)
                _held.discard(descriptor)
                os.close(descriptor)
        for folder in sorted(self.made, key=len, reverse=True):  # the deepest first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self.held, self.made = [], []


def lock_outputs(outputs: Sequence[tuple[str, str | None]]) -> OutputLocks:
    """Lock each output ``(label, path)`` of a run that has a path, all or none.

    Raises:
        ValueError: another live run holds one; the message names it, with that run's pid.
    """
    locks = OutputLocks()
    if fcntl is None:
        return locks
    # Taken in one order, so that two runs started together cannot each take one output the other wants
    # and both be refused.
    outputs = sorted(((label, path) for label, path in outputs if path), key=lambda output: lock_path(output[1]))
    try:
        for label, path in outputs:
            locks.take(label, path)
    except BaseException:
        locks.release()
        raise
    return locks

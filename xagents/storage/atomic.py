"""Write files so that a kill at any moment leaves the previous version or the new one, whole.

Also the checks that let a run refuse an output location before it starts, and the clean-up of
temporary files that a killed write left behind.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from typing import IO, Iterator

# mkstemp's names: the prefix (a dot, the name of the file written, a dot) and 8 random characters.
TEMPORARY = re.compile(r'^\.(.+)\.[A-Za-z0-9_]{8}$')


def _temporary_prefix(path: str) -> str:
    return f'.{os.path.basename(path)}.'


@contextlib.contextmanager
def atomic_write(path: str) -> Iterator[IO[bytes]]:
    """Yield a temporary file beside ``path``; on success fsync it and rename it over ``path``.

    Raises:
        OSError: writing failed (full disk, read-only location...); it names ``path``, and ``path``
            still holds its previous content.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=_temporary_prefix(path), dir=directory)
    except OSError as error:
        raise OSError(error.errno, error.strerror, path) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
    try:
        with os.fdopen(descriptor, 'wb') as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        if isinstance(error, OSError) and error.filename != path:  # none, or the temporary (a rename refused)
            raise OSError(error.errno, error.strerror, path) from None
        raise


def check_writable(path: str, directory: bool = False) -> None:
    """Raise a ValueError naming ``path`` unless a file (or, with ``directory``, files inside a
    directory) can be written there. Touches nothing: a probe file is made and removed in the nearest
    folder that exists, and missing folders are left for the write to create."""
    if directory and os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f'{path} is not a directory')
    if not directory and os.path.isdir(path):
        raise ValueError(f'{path} is a directory, expected a file name')
    existing = os.path.normpath(path) if directory else os.path.dirname(os.path.normpath(path)) or '.'
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or '.'
    if not os.path.isdir(existing):
        raise ValueError(f'cannot write {path}: {existing} is not a directory')
    try:
        descriptor, probe = tempfile.mkstemp(prefix=_temporary_prefix(path), dir=existing)
        os.close(descriptor)
        os.remove(probe)
    except OSError as error:
        raise ValueError(f'cannot write {path}: {error.strerror}') from None
    if not directory and os.path.isfile(path):
        _check_replaceable(path)


def _check_replaceable(path: str) -> None:
    """Refuse an existing file that no write can replace, an immutable or append-only one (``chattr +i``): opening
    it for writing, which changes nothing, is refused with EPERM (other refusals, EACCES, don't stop a rename)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except PermissionError as error:
        if error.errno == errno.EPERM:
            raise ValueError(f'cannot write {path}: {error.strerror} (an immutable or append-only file: '
                             f'chattr -i -a {path}, or choose another path)') from None
    except OSError:
        pass


def stale_temporaries(directory: str) -> dict[str, str]:
    """The temporary files of :func:`atomic_write` in ``directory``, each with the name of the file it was
    to replace (with one writer at a time, those a killed write left)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    return {name: match[1] for name in names if (match := TEMPORARY.match(name))}


def remove_stale_temporaries(path: str) -> list[str]:
    """Delete the temporary files that writes of ``path`` left when killed; return their names."""
    directory = os.path.dirname(os.path.abspath(path))
    names = [name for name, target in stale_temporaries(directory).items() if target == os.path.basename(path)]
    removed = []
    for name in names:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed

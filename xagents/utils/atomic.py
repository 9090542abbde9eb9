"""Write files so that a kill at any moment leaves the previous version or the new one, whole."""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str) -> Iterator[IO[bytes]]:
    """Yield a temporary file beside ``path``; on success fsync it and rename it over ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.', dir=directory)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
    try:
        with os.fdopen(descriptor, 'wb') as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise

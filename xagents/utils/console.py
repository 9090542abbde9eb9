"""What xagents prints: TensorFlow loaded without its C++ start-up noise, progress on the console by default."""
from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import logging
import os
import sys
from typing import Iterator


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Hide what native code writes to the stderr file descriptor meanwhile (TensorFlow's C++ runtime
    prints CUDA probes and oneDNN notes while it loads, whatever ``TF_CPP_MIN_LOG_LEVEL`` says)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, 'w') as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_tensorflow() -> None:
    """Import TensorFlow quietly, unless it is loaded already (``TF_CPP_MIN_LOG_LEVEL`` set by the user wins).

    Python's cyclic garbage collector pauses while it loads: its objects would set off full collections that
    free nothing (~0.7 s of the import on 2 cores). They are frozen afterwards (``gc.freeze``, ~1 s less of
    collections in a short run), and everything again at exit, so the interpreter's shutdown does not walk
    them (~0.9 s). Not frozen early when ale-py loaded first: its extension would report leaks at exit.
    """
    if 'tensorflow' in sys.modules:
        return
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    collecting = gc.isenabled()
    gc.disable()
    try:
        with native_stderr_silenced():
            importlib.import_module('tensorflow')
    finally:
        if collecting:
            gc.enable()
    if 'ale_py' not in sys.modules:  # frozen this early, ale-py's objects are reported leaked at exit (nanobind)
        gc.freeze()
    atexit.register(gc.freeze)


def console_logging() -> None:
    """Show xagents' progress lines on stdout when the program configured no logging (a script)."""
    library = logging.getLogger('xagents')
    if library.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter('%(message)s'))
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False  # logging configured later would print each line twice

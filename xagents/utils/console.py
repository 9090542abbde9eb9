"""What xagents prints: Keras and its backend loaded without their C++ start-up noise, progress on the console by default."""
from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import logging
import os
import select
import signal
import sys
import threading
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


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM meanwhile and deliver them after: a KeyboardInterrupt raised inside a C++ extension's
    initialisation (ale-py's, which nanobind turns into a C++ exception) aborts the process instead of stopping it.
    Only the main thread handles signals; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: held.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if held:
            signal.raise_signal(held[0])  # to the handler it was meant for: KeyboardInterrupt, or the default


_dropped_interruption = False  # set by record_dropped_interruption, cleared by interruption_dropped
_previous_unraisablehook = sys.unraisablehook  # where record_dropped_interruption passes anything else on


def stop_as_on_ctrl_c(number: int, frame: object) -> None:
    """Signal handler for Ctrl-C and SIGTERM: raise KeyboardInterrupt. One that lands inside a hook Python calls for
    itself (JAX's garbage-collection callback, which TensorFlow loads) Python drops: see
    :func:`record_dropped_interruption`."""
    raise KeyboardInterrupt


def record_dropped_interruption(unraisable: object) -> None:
    """``sys.unraisablehook`` while signals stop in order: a KeyboardInterrupt that Python dropped (raised inside a
    garbage-collection callback or a finaliser) is remembered for the run to stop at its next check, not printed;
    anything else goes to the hook before."""
    global _dropped_interruption
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _dropped_interruption = True
    else:
        _previous_unraisablehook(unraisable)


def stop_in_order_on_signals() -> None:
    """Make Ctrl-C and SIGTERM raise KeyboardInterrupt through :func:`stop_as_on_ctrl_c`: the run or search ends in
    order, its files written, also when Python drops the interrupt (:func:`record_dropped_interruption`)."""
    global _previous_unraisablehook
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, stop_as_on_ctrl_c)
    if sys.unraisablehook is not record_dropped_interruption:
        _previous_unraisablehook, sys.unraisablehook = sys.unraisablehook, record_dropped_interruption


def interruption_dropped() -> bool:
    """Whether Python dropped the KeyboardInterrupt of a Ctrl-C or SIGTERM since the last call; clears it."""
    global _dropped_interruption
    came, _dropped_interruption = _dropped_interruption, False
    return came


def stop_if_interruption_dropped() -> None:
    """Raise again the KeyboardInterrupt of a Ctrl-C or SIGTERM that Python dropped since the last check."""
    if interruption_dropped():
        raise KeyboardInterrupt


BACKENDS = ('tensorflow', 'jax', 'torch')  # the Keras backends xagents runs on
# The packages to reinstall when a backend is installed but cannot load.
BACKEND_PACKAGES = {'tensorflow': ('tensorflow',), 'jax': ('jax', 'jaxlib'), 'torch': ('torch',)}
_used_backend = None  # the name use_backend put in KERAS_BACKEND, which a message then need not blame


class BackendError(ImportError):
    """The Keras backend chosen is unknown, not installed, or cannot load: one line, with what fixes it (the pip
    command, or the names xagents runs on)."""


def unknown_backend(name: object) -> str:
    """What is wrong with a backend name xagents does not run on."""
    return f'expected a backend among {", ".join(BACKENDS)}, got {name!r}'


def use_backend(name: str) -> None:
    """Run xagents on the Keras backend ``name`` (``tensorflow``, the default, ``jax`` or ``torch``): before the first
    agent is built, as ``KERAS_BACKEND`` does. ``--backend`` on the command line calls it.

    Raises:
        ValueError: an unknown backend, or Keras already runs on another one in this process.
    """
    global _used_backend
    if name not in BACKENDS:
        raise ValueError(unknown_backend(name))
    if 'keras' in sys.modules:
        running = sys.modules['keras'].backend.backend()
        if running != name:
            raise ValueError(f'Keras already runs on {running} in this process: choose the backend before the first '
                             f'agent is built (xagents.use_backend({name!r}) first, or KERAS_BACKEND={name})')
        return
    os.environ['KERAS_BACKEND'] = _used_backend = name


def chosen_backend() -> tuple[object, str]:
    """The backend Keras will load, as Keras picks it, and what picked it (said in errors): ``KERAS_BACKEND``, else
    the ``backend`` of ``keras.json`` in ``KERAS_HOME`` (else ``~/.keras``), else TensorFlow, the default."""
    name = os.environ.get('KERAS_BACKEND')
    if name:
        return name, '' if name == _used_backend else ' (KERAS_BACKEND)'
    if 'KERAS_HOME' in os.environ:
        home = os.environ['KERAS_HOME']
    else:
        base = os.path.expanduser('~')
        home = os.path.join(base if os.access(base, os.W_OK) else '/tmp', '.keras')
    path = os.path.expanduser(os.path.join(home, 'keras.json'))
    try:
        with open(path) as file:
            config = json.load(file)
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and 'backend' in config:
        return config['backend'], f' (the backend of {path})'
    return 'tensorflow', ' (the default: KERAS_BACKEND=jax or torch chooses another)'


def backend_install(name: str) -> str:
    """The pip command that installs backend ``name``: this xagents' extra's requirements (the package index's
    ``xagents`` is another project), TensorFlow as ``install_requires`` names it."""
    from xagents.utils.extras import install_command

    if name == 'tensorflow':
        return "pip install 'tensorflow>=2.16' (or run on jax or torch: --backend, KERAS_BACKEND)"
    if name == 'torch':  # PyPI's torch on Linux is the CUDA build, 3 GB
        return f"{install_command('torch')} (on Linux without an NVIDIA GPU, its CPU build: see the Backends guide)"
    return install_command(name)


def one_line(error: BaseException) -> str:
    """``error`` as 'Kind: the first line of its message'."""
    lines = str(error).strip().splitlines()
    return f'{type(error).__name__}: {lines[0]}' if lines else type(error).__name__


def backend_error(name: str, origin: str, error: Exception) -> BackendError:
    """What to say when importing Keras failed with ``error`` on backend ``name``: the backend is missing, installed
    but broken (importing it alone fails too), or loads while Keras does not."""
    if isinstance(error, ModuleNotFoundError) and (error.name or '').partition('.')[0] == 'keras':
        return BackendError("Keras is not installed: pip install 'keras>=3.10'")
    try:
        with native_stderr_silenced():
            if name == 'jax':
                importlib.import_module('jax')
            elif name == 'torch':
                importlib.import_module('torch')
            else:
                importlib.import_module('tensorflow')
    except Exception as own:  # whatever stops the backend's own import is the reason
        missing = (isinstance(own, ModuleNotFoundError) and own.name
                   and own.name.partition('.')[0] in BACKEND_PACKAGES[name])
        if missing:
            return BackendError(f"Keras' {name} backend{origin} is not installed ({one_line(own)}): "
                                f'{backend_install(name)}')
        return BackendError(f"Keras' {name} backend{origin} is installed but cannot load ({one_line(own)}): "
                            f'reinstall it, pip install --force-reinstall --no-deps {" ".join(BACKEND_PACKAGES[name])}')
    return BackendError(f'Keras cannot load on its {name} backend{origin} ({one_line(error)}): '
                        'pip install --upgrade keras')


def load_keras() -> None:
    """Import Keras, and with it its backend (TensorFlow unless ``KERAS_BACKEND`` or ``keras.json`` says otherwise),
    quietly, unless it is loaded already (``TF_CPP_MIN_LOG_LEVEL`` set by the user wins).

    Python's cyclic garbage collector pauses while it loads: its objects would set off full collections that
    free nothing (~0.7 s of the import on 2 cores). They are frozen afterwards (``gc.freeze``, ~1 s less of
    collections in a short run), and everything again at exit, so the interpreter's shutdown does not walk
    them (~0.9 s). Not frozen early when ale-py loaded first: its extension would report leaks at exit.

    Raises:
        BackendError: the backend chosen is not one xagents runs on, is not installed, or cannot load (one line
            with the pip command that fixes it, instead of Keras' traceback).
    """
    if 'keras' in sys.modules:
        return
    name, origin = chosen_backend()
    if name not in BACKENDS:
        raise BackendError(f'{unknown_backend(name)}{origin}')
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    if os.environ.get('KERAS_BACKEND') == 'torch':
        # PyTorch's OpenMP threads spin while they wait for work: beside another busy process on the same cores (a
        # second test or benchmark process, a Ray worker) a SAC and PPO run of 18 s alone took over 300 s; waiting
        # passively, 18-19 s. Read when PyTorch loads, so set before Keras imports it.
        os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    collecting = gc.isenabled()
    gc.disable()
    try:
        # A Ctrl-C inside a dependency's C++ extension while it initialises aborts the process (SIGABRT, its message
        # silenced with the rest), or surfaces as an ImportError that Keras replaces with its own: it is held until
        # the import ends, a second or two, and then stops the command as anywhere else.
        with native_stderr_silenced(), interrupts_deferred():
            importlib.import_module('keras')
    except Exception as error:
        if interrupted(error):
            raise
        raise backend_error(name, origin, error) from error
    finally:
        if collecting:
            gc.enable()
    if 'ale_py' not in sys.modules:  # frozen this early, ale-py's objects are reported leaked at exit (nanobind)
        gc.freeze()
    atexit.register(gc.freeze)


def load_tensorflow() -> None:
    """Import TensorFlow quietly (what TensorFlow-only features need: export, TensorBoard), after Keras."""
    load_keras()
    if 'tensorflow' not in sys.modules:
        with native_stderr_silenced():
            importlib.import_module('tensorflow')
        from keras.src.utils import module_utils

        module_utils.tensorflow._available = None  # (see xagents.backend: Keras may look for TensorFlow's objects)


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


class OutputClosed(Exception):
    """Standard output's reader went away (``xagents ... | head`` once head has its lines): the command ends,
    quietly, as a program that SIGPIPE ends (see :mod:`xagents.app.command`)."""


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll reports an error on its write end)."""
    poller = select.poll()
    poller.register(1, 0)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null: what Python still buffers for stdout, and every later line, go nowhere
    (Python's recipe for a closed pipe: https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class CommandOutput(logging.StreamHandler):
    """The command's log lines on stdout. Where stdout's reader has gone, :class:`OutputClosed` is raised from
    the logging call (logging's own way, a traceback per line while the run goes on, is replaced), so a run or
    a search piped to ``head`` stops once head has read its lines."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError) and self.stream is sys.stdout and stdout_closed():
            silence_stdout()
            raise OutputClosed('standard output was closed') from None
        super().handleError(record)


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` comes from a Ctrl-C: one that lands in a C extension's initialisation (TensorFlow's, while
    it loads) surfaces as that module's ImportError, caused by the KeyboardInterrupt."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__ or error.__context__
    return False

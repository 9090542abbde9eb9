"""The ``xagents`` console script: the command line, loaded so that a Ctrl-C while its modules load is one line
(``xagents: interrupted``, exit status 130), as it is once :func:`xagents.app.cli.main` runs; output piped into a
program that stopped reading (``| head``) ends it quietly."""
from __future__ import annotations

import signal
import sys

from xagents.utils.console import OutputClosed, interrupted, silence_stdout, stdout_closed, stop_in_order_on_signals

# The exit status when stdout's reader has gone: 128 + SIGPIPE (141), what a shell reports for a program that
# SIGPIPE ended (`seq 1000000 | head -1`), help included, so a `set -o pipefail` script sees that the output was
# cut short. Python ignores SIGPIPE (a write raises BrokenPipeError instead), and it stays ignored: restoring its
# default would also end the process on a database or worker connection that closed.
CLOSED_OUTPUT_STATUS = 128 + signal.SIGPIPE
STOPPED_IN_ORDER = ('train', 'play', 'export', 'tune')  # the commands whose SIGTERM is their Ctrl-C


def main() -> None:
    """Entry point of the ``xagents`` console script and of ``python -m xagents``."""
    # A terminated run or search stops as on Ctrl-C from the command's first moment (reading an env's presets,
    # loading TensorFlow), not only once it has started: one line, status 130. (A benchmark is left to SIGTERM's
    # default: its runs are child processes that a Ctrl-C in its terminal stops with it.)
    if sys.argv[1:2] and sys.argv[1] in STOPPED_IN_ORDER:
        stop_in_order_on_signals()
    try:
        from xagents.app.cli import main as command
    except BaseException as error:
        if not interrupted(error):
            raise
        sys.stderr.write('xagents: interrupted\n')
        raise SystemExit(130) from None
    try:
        try:
            command()
        finally:  # what stdout buffers for a pipe is written here, inside this handling, not at exit
            sys.stdout.flush()
    except (OutputClosed, BrokenPipeError) as error:
        if isinstance(error, BrokenPipeError) and not stdout_closed():  # another pipe (a worker's): not ours
            raise
        silence_stdout()  # Python's own flush at exit then writes nowhere, instead of a second error
        raise SystemExit(CLOSED_OUTPUT_STATUS) from None
    if stdout_closed():  # argparse's help drops a failed write silently: the reader left before the end all the same
        raise SystemExit(CLOSED_OUTPUT_STATUS)

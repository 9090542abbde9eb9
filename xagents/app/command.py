"""The ``xagents`` console script: the command line, loaded so that a Ctrl-C while its modules load is one line
(``xagents: interrupted``, exit status 130), as it is once :func:`xagents.app.cli.main` runs."""
from __future__ import annotations

import sys


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` comes from a Ctrl-C: one that lands in a C extension's initialisation (TensorFlow's, while
    it loads) surfaces as that module's ImportError, caused by the KeyboardInterrupt."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__ or error.__context__
    return False


def main() -> None:
    """Entry point of the ``xagents`` console script and of ``python -m xagents``."""
    try:
        from xagents.app.cli import main as command
    except BaseException as error:
        if not interrupted(error):
            raise
        sys.stderr.write('xagents: interrupted\n')
        raise SystemExit(130) from None
    command()

"""Optional dependencies (setup.py's extras): whether one is installed, and the command that installs it.

The package index's ``xagents`` is another, older project, so ``pip install 'xagents[export]'`` would replace
this xagents with it: the command names the extra's own requirements, read from this installation.
"""
from __future__ import annotations

import importlib.util
import re
import shlex


def install_command(extra: str) -> str:
    """A pip command that installs this xagents' ``extra``: its requirements by name and version."""
    import importlib.metadata  # (slow to import: only when a message needs it)

    try:
        requirements = importlib.metadata.requires('xagents') or []
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that was never installed
        requirements = []
    wanted = [requirement.split(';')[0].strip() for requirement in requirements
              if re.search(rf'extra\s*==\s*["\']{re.escape(extra)}["\']', requirement)]
    if not wanted:
        return f"pip install '.[{extra}]' in the xagents source folder"
    return 'pip install ' + ' '.join(shlex.quote(requirement) for requirement in wanted)


def require_tensorflow(purpose: str) -> None:
    """Raise a one-line ValueError if TensorFlow is not installed (an install for JAX or PyTorch alone), naming what
    needs it and the command that installs it."""
    if importlib.util.find_spec('tensorflow') is None:
        raise ValueError(f"{purpose} needs TensorFlow, which this installation left out: "
                         "pip install 'tensorflow>=2.16'")


def require(module: str, extra: str, purpose: str) -> None:
    """Raise a one-line ValueError naming the install command if ``module`` (of ``extra``) is not installed:
    checked before a run starts, so that nothing is made and then abandoned mid-training."""
    if importlib.util.find_spec(module) is None:
        raise ValueError(f'{purpose} needs the {module} package: {install_command(extra)}')

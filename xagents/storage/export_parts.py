"""What every export writer shares (:mod:`xagents.storage.export` and its TensorFlow and PyTorch writers): the
names of an export's inputs and outputs, their specs from the observation space, calling a policy on them, the
one-line check that a converter is installed, and writes that leave either nothing or a whole export."""
from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from types import ModuleType
from typing import Callable, Sequence

import gymnasium as gym
import numpy as np
from xagents.utils.extras import install_command

from xagents.storage.atomic import atomic_write

ONNX_OPSET = 17
INPUT_NAME = 'observations'
MASK_NAME = 'action_mask'  # the optional second input: (batch, n) booleans of the allowed actions
OUTPUT_NAME = 'actions'
STARTS_NAME, STATE_NAME = 'episode_start', 'state'  # a recurrent policy's inputs
NEXT_STATE_NAME = 'next_state'  # and its second output (ONNX names are unique across inputs and outputs)
SIGNATURE_KEY = 'serving_default'


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise a one-line ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f'{purpose} needs the {module} package: {install_command("export")}') from None


def check_destination(path: str) -> None:
    """Refuse to export over anything: the user removes it or picks another path."""
    if os.path.lexists(path):
        raise ValueError(f'{path} already exists: remove it or choose another path to export to')


Spec = tuple[tuple[int | None, ...], str]  # an export input's shape (None: the dynamic batch) and dtype name


def input_specs(observation_space: gym.spaces.Space) -> dict[str, Spec]:
    """The exported inputs by name: the space's dtype and shape behind a dynamic batch dimension, one
    ``observations`` input for a Box, one input per key for a Dict."""
    if isinstance(observation_space, gym.spaces.Dict):
        return {key: input_specs(space)[INPUT_NAME] for key, space in observation_space.spaces.items()}
    if isinstance(observation_space, gym.spaces.Discrete):
        return {INPUT_NAME: ((None,), 'int64')}
    if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        raise TypeError(f'only Box and Dict observation spaces can be exported, not {type(observation_space).__name__}')
    return {INPUT_NAME: ((None, *observation_space.shape), np.dtype(observation_space.dtype).name)}


def call_policy(policy: Callable, names: list[str], inputs: Sequence) -> tuple:
    """Call ``policy`` on an export's inputs in the order of ``names``: the observations (a dict of them for several
    keys), the action masks after them, ``memory=(episode_start, state)`` for a recurrent policy. Return its actions
    and its next state (None without memory)."""
    observations = dict(zip(names, inputs))
    masks = observations.pop(MASK_NAME, None)
    memory = (observations.pop(STARTS_NAME), observations.pop(STATE_NAME)) if STATE_NAME in names else None
    observations = observations[INPUT_NAME] if list(observations) == [INPUT_NAME] else observations
    result = policy(observations, *([] if masks is None else [masks]), **({} if memory is None else {'memory': memory}))
    return (result[0], result[1]) if memory else (result, None)


def write_file(path: str, content: bytes) -> None:
    """Write ``content`` to a temporary sibling, fsync it and rename it to ``path``."""
    with atomic_write(path) as file:
        file.write(content)


def _fsync_tree(directory: str) -> None:
    """Flush every file and folder under ``directory`` to disk, so the rename publishes whole files."""
    for folder, _, names in os.walk(directory, topdown=False):
        for name in names:
            with open(os.path.join(folder, name), 'rb') as file:
                os.fsync(file.fileno())
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_directory(path: str, write: Callable[[str], None]) -> None:
    """Let ``write`` fill a temporary sibling directory, then rename it to ``path``."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f'.{os.path.basename(os.path.normpath(path))}.', dir=parent)
    try:
        write(temporary)
        _fsync_tree(temporary)
        check_destination(path)
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(temporary)
        raise

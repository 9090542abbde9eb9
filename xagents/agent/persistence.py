"""What an agent's files record and how they are checked: best-model checkpoints (one ``.npz`` per model role,
``--checkpoints``) and whole-agent save directories (``agent.save`` / ``Agent.load``).

Every file records its origin (agent, env id, spaces), so another run's files are refused rather than loaded;
a set written together (the models of one save, a save's buffer) carries one step count, so a set torn by a kill
is refused too. The functions take the agent; :class:`xagents.agent.base.BaseAgent` exposes them as methods.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, Sequence

import gymnasium as gym
import numpy as np

from xagents import backend
from xagents.utils.extras import require_tensorflow
from xagents.storage.atomic import atomic_write, check_writable
from xagents.replay.buffer_state import buffer_state, restore_buffer_state
from xagents.storage.checkpoints import checkpoint_arrays, read_checkpoint, save_checkpoint, write_checkpoint
from xagents.envs.creation import ENV_PARAMETERS, as_vector_env, create_envs, env_settings, vector_settings
from xagents.networks.models import is_image_space
from xagents.storage.history import check_identity
from xagents.storage.readback import damaged, read_arrays
from xagents.storage.saved import (FIX, MANIFEST, check_settings, json_values, read_manifest, saved_agent, saved_file,
                                 write_manifest)

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent

# The running statistics a checkpoint can hold, and the constructor flag that makes an agent keep them.
NORMALISATION_FLAGS = {'observation': 'normalize_observations', 'return': 'normalize_rewards'}


def identity_of(agent: str, envs: gym.vector.VectorEnv) -> dict[str, str | None]:
    """What files made by ``agent`` on ``envs`` record of their origin: agent, env id (if known), spaces."""
    return {'agent': agent, 'env_id': (env_settings(envs) or {}).get('env_id'),
            'observation_space': str(envs.single_observation_space), 'action_space': str(envs.single_action_space)}


# ---------------------------------------------------------------------------------- checkpoints
def save_models(agent: BaseAgent, paths: Sequence[str]) -> None:
    """Save every model (with its optimizer, the step counter and the run's identity) to ``paths``, one per role."""
    for path, arrays in model_checkpoints(agent, paths).items():
        write_checkpoint(path, arrays)


def model_checkpoints(agent: BaseAgent, paths: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """What :func:`save_models` writes to each of ``paths``, copied now (``write_checkpoint`` writes it later)."""
    return {path: checkpoint_arrays(path, agent.models[role], agent.optimizers.get(role),
                                    extras=checkpoint_extras(agent, role), identity=agent.identity(), steps=agent.steps)
            for role, path in zip(agent.model_roles, paths)}


def checkpoint_extras(agent: BaseAgent, role: str) -> dict[str, np.ndarray]:
    """Arrays saved beside ``role``'s weights: the running statistics, with the first model."""
    if role != agent.model_roles[0]:
        return {}
    return {f'{name}_{field}': np.asarray(getattr(stats, field))
            for name, stats in agent.running_statistics().items() for field in ('mean', 'var', 'count')}


def restore_extras(agent: BaseAgent, role: str, extras: dict[str, np.ndarray]) -> None:
    """Take back what :func:`checkpoint_extras` saved for ``role``."""
    if role != agent.model_roles[0]:
        return
    statistics = agent.running_statistics()
    unexpected = sorted({key.rsplit('_', 1)[0] for key in extras} - set(statistics))
    if unexpected:
        flag = NORMALISATION_FLAGS.get(unexpected[0], unexpected[0])
        raise ValueError(f'the {role} weights were trained with {unexpected[0]} normalisation: build the agent '
                         f'with {flag} (--{flag.replace("_", "-")})')
    for name, stats in statistics.items():
        if f'{name}_mean' not in extras:
            raise ValueError(f'expected {name} statistics in the {role} weights file (saved by a run that '
                             'normalised them), found none')
        stats.mean, stats.var = extras[f'{name}_mean'], extras[f'{name}_var']
        stats.count = float(extras[f'{name}_count'])


def trained_normalisation(weights: Sequence[str]) -> dict[str, bool]:
    """The normalisation flags the weights files were trained with, e.g. ``{'normalize_observations': True}``:
    playing or exporting them needs the same (a directory written by save records its own)."""
    if not weights or os.path.isdir(weights[0]):
        return {}
    names = {key.rsplit('_', 1)[0] for key in read_checkpoint(weights[0]).extras}
    # (observations explicitly off without statistics: their default may be on, where observations hold a grid)
    return {'normalize_observations': False,
            **{flag: True for name, flag in NORMALISATION_FLAGS.items() if name in names}}


def load_weights(agent: BaseAgent, weights: Sequence[str]) -> None:
    """Load models (and optimizer states) saved by :func:`save_models`, one path per role, or a directory
    written by :func:`save` (see :meth:`BaseAgent.load_weights`)."""
    if len(weights) == 1 and os.path.isdir(weights[0]):  # a directory written by save (or a save_dir: its latest)
        agent.restore(saved_agent(weights[0]))
        return
    checkpoints = [read_checkpoint(path) for path in weights]
    for checkpoint in checkpoints:  # another agent's weights are named as such, before their count
        check_identity(checkpoint.path, checkpoint.identity, agent.identity())
    roles = agent.model_roles
    if len(weights) != len(roles):
        raise ValueError(f'{type(agent).__name__} has {len(roles)} model(s) ({", ".join(roles)}), got '
                         f'{len(weights)} weights file(s)')
    steps = {checkpoint.path: checkpoint.steps for checkpoint in checkpoints}
    if len(set(steps.values())) > 1:
        listed = ', '.join(f'{path} at step {step}' for path, step in steps.items())
        raise ValueError(f'expected weights files saved together, got {listed} (a set torn by a kill while saving)')
    for role, checkpoint in zip(roles, checkpoints):
        checkpoint.restore(agent.models[role], agent.optimizers.get(role))
        restore_extras(agent, role, checkpoint.extras)
    agent.weights_loaded = list(weights)
    agent.on_weights_changed()


# ------------------------------------------------------------------------------ save and load
def save(agent: BaseAgent, path: str, include_buffer: bool = False) -> str:
    """Write the agent to directory ``path`` (see :meth:`BaseAgent.save`)."""
    check_writable(path, directory=True)
    os.makedirs(path, exist_ok=True)
    tag = f'{agent.steps:012d}-{os.urandom(4).hex()}'
    files = {}
    for role in agent.model_roles:
        files[role] = f'{role}-{tag}.npz'
        save_checkpoint(os.path.join(path, files[role]), agent.models[role], agent.optimizers.get(role),
                        extras=checkpoint_extras(agent, role), identity=agent.identity(), steps=agent.steps)
    if include_buffer:
        files['buffer'] = f'buffer-{tag}.npz'
        save_buffer(agent, os.path.join(path, files['buffer']))
    hyperparameters, unsaved = json_values(agent.hyperparameters)
    write_manifest(path, {
        'agent': type(agent).__name__, 'identity': agent.identity(), 'steps': agent.steps, 'files': files,
        'hyperparameters': hyperparameters, 'unsaved': unsaved,
        'env': vector_settings(agent.envs),
        'training_state': agent.training_state(),
    })
    return path


def load(cls: type[BaseAgent], path: str, env=None, **overrides) -> BaseAgent:
    """Rebuild an agent saved by :func:`save`, or the latest save of a save_dir (see :meth:`BaseAgent.load`)."""
    path = saved_agent(path)
    manifest = read_manifest(path)
    if manifest['agent'] != cls.__name__:
        raise ValueError(f'{path} holds a saved {manifest["agent"]}, not {cls.__name__}: load it as '
                         f'{manifest["agent"]} ({manifest["agent"]}.load, xagents ... {manifest["agent"].lower()})')
    check_settings(path, manifest, cls)
    missing = [name for name in manifest['unsaved'] if name not in overrides]
    if missing:
        raise ValueError(f'{path} could not save {", ".join(missing)} (not JSON): pass it to load')
    settings, run_settings = cls.run_settings_apart({**manifest['hyperparameters'], **overrides})
    env_overrides = {name: settings.pop(name) for name in ENV_PARAMETERS if name in settings}
    if env is None or isinstance(env, str):
        made = dict(manifest['env'] or {})
        if not made and env is None:
            raise ValueError(f'{path} was trained on an env not made from an id: pass the env to load')
        made['env_id'] = env or made['env_id']
        envs = create_envs(**{**made, **env_overrides, 'seed': settings.get('seed')})
    else:
        envs = as_vector_env(env)
    try:
        check_identity(path, manifest['identity'], identity_of(cls.__name__, envs))  # before building
        saved_by = saved_version(manifest)
        settings.update(former_default_models(cls, saved_by, settings, envs.single_observation_space))
        settings.update(cls.defaults_before(saved_by, settings, envs))
        agent = cls(envs, **settings)
        agent.run_defaults.update(run_settings)
        agent.restore(path, manifest)
    except BaseException:
        envs.close()
        raise
    return agent


def saved_version(manifest: dict) -> tuple[int, ...]:
    """The (major, minor) version of xagents that wrote a save."""
    return tuple(int(part) for part in manifest.get('xagents_version', '0').split('.')[:2] if part.isdigit())


def former_default_models(cls: type[BaseAgent], saved_by: tuple[int, ...], settings: dict, space: gym.Space) -> dict:
    """The models that a save of an xagents before ``cls.dense_variant_since`` built by default where the agent's
    packaged dense default has changed since (SAC's, TQC's and DDPG's 64-64 ``ann-<role>.cfg`` before 2.1, TD3's
    before 2.2, now SB3's sizes), for the saved settings that leave them to the default (a save holds the
    arguments given)."""
    if not cls.dense_variant or saved_by >= cls.dense_variant_since or settings.get('simba') or is_image_space(space):
        return {}
    return {f'{role}_model': f'ann-{role}.cfg' for role in cls.model_roles
            if f'{role}_model' in cls.parameter_names() and settings.get(f'{role}_model') is None}


def restore(agent: BaseAgent, path: str, manifest: dict | None = None) -> None:
    """Take back the models, statistics, step counter, random state (and replay buffer) of a directory written
    by :func:`save` into ``agent``."""
    manifest = manifest or read_manifest(path)
    check_identity(path, manifest['identity'], agent.identity())
    for role in agent.model_roles:
        checkpoint = read_checkpoint(saved_file(path, manifest, role), FIX)
        if checkpoint.steps != manifest['steps']:
            raise ValueError(f'{checkpoint.path} is from step {checkpoint.steps}, {path} from step '
                             f'{manifest["steps"]}: a set torn while saving')
        try:
            checkpoint.restore(agent.models[role], agent.optimizers.get(role))
        except ValueError as error:
            former = former_default_models(type(agent), saved_version(manifest), agent.hyperparameters,
                                           agent.envs.single_observation_space)
            if not former:
                raise
            given = ', '.join(f'{name}={value!r}' for name, value in former.items())
            flags = ' '.join(f'--{name.replace("_", "-")} {value}' for name, value in former.items())
            since = '.'.join(map(str, type(agent).dense_variant_since))
            raise ValueError(f'{error}: {path} was saved with the 64-64 networks that were the default before xagents '
                             f'{since}; build the agent with them ({given}; on the command line {flags})') from None
        restore_extras(agent, role, checkpoint.extras)
    if 'buffer' in manifest['files']:
        load_buffer(agent, os.path.join(path, manifest['files']['buffer']))
    agent.steps = int(manifest['steps'])
    try:
        agent.restore_training_state(manifest['training_state'])
    except (KeyError, TypeError, ValueError) as error:
        raise damaged(os.path.join(path, MANIFEST), f'its training_state does not fit {type(agent).__name__}: '
                                                    f'{error!r}', FIX) from None
    agent.weights_loaded = [path]
    agent.on_weights_changed()


def save_buffer(agent: BaseAgent, path: str) -> None:
    """Write the replay buffer to ``path`` (agents that replay: off-policy agents and ACER)."""
    if not hasattr(agent, 'buffer'):
        raise ValueError(f'{type(agent).__name__} keeps no replay buffer to save')
    with atomic_write(path) as file:
        np.savez(file, **buffer_state(agent.buffer))


def load_buffer(agent: BaseAgent, path: str) -> None:
    """Take back a replay buffer written by :func:`save_buffer`."""
    fix = f'load another save, or delete "buffer" from the files of {MANIFEST} to load it without the buffer'
    restore_buffer_state(agent.buffer, read_arrays(path, fix), path)


EXPORT_IN_TENSORFLOW = """
import importlib, sys
from xagents.utils.console import load_keras
load_keras()
module, _, name = sys.argv[1].partition(':')
agent = getattr(importlib.import_module(module), name).load(sys.argv[2], quiet=True)
try:
    agent.export(sys.argv[3], None if sys.argv[4] == '-' else sys.argv[4], action_mask=sys.argv[5] == '1')
except (ValueError, TypeError, ImportError) as error:
    sys.exit(f'{type(error).__name__}: {error}')
"""


def export_through_tensorflow(agent: BaseAgent, path: str, format: str | None, action_mask: bool) -> str:
    """Export an agent that runs on another Keras backend: a TensorFlow process loads a save of it and exports that
    (TensorFlow writes every export format; the save is the same file on every backend).

    Raises:
        ValueError: the agent's envs were not made from an env id, so the TensorFlow process cannot make them again.
    """
    _, unsaved = json_values(agent.hyperparameters)
    if unsaved:  # before asking for TensorFlow, which could not help
        raise ValueError(f'on the {backend.NAME} backend, export runs in a TensorFlow process that makes the agent '
                         f'again from a save, and a save cannot hold your {", ".join(unsaved)} (a network of yours, '
                         'not JSON): export works for networks built from .cfg files, for Keras models on the '
                         'TensorFlow backend, and to ONNX on PyTorch' + (
                             '; a Flax module or JAX functions do not export (act with predict, or build the '
                             'network from a .cfg file)' if backend.NAME == 'jax' else ''))
    require_tensorflow(f'exporting from the {backend.NAME} backend (a TensorFlow process writes the file)')
    if vector_settings(agent.envs) is None:
        raise ValueError(f'on the {backend.NAME} backend, export runs in a TensorFlow process that makes the agent '
                         "again from its env id, and this agent's envs were not made from one: make it from an id "
                         f'({type(agent).__name__}.from_env), or save it and export it on TensorFlow '
                         f'(KERAS_BACKEND=tensorflow: {type(agent).__name__}.load(path, env=...).export(...))'
                         + (', or export to ONNX, which PyTorch writes here' if backend.NAME == 'torch' else ''))
    cls = type(agent)
    with tempfile.TemporaryDirectory(prefix='xagents-export-') as folder:
        save(agent, folder)
        child = subprocess.run(
            [sys.executable, '-c', EXPORT_IN_TENSORFLOW, f'{cls.__module__}:{cls.__qualname__}', folder, path,
             format or '-', '1' if action_mask else '0'],
            capture_output=True, text=True, env={**os.environ, 'KERAS_BACKEND': 'tensorflow'})
    if child.returncode:
        lines = child.stderr.strip().splitlines() or ['no output']
        kind, _, message = lines[-1].partition(': ')
        if kind in ('ValueError', 'TypeError', 'ImportError'):
            raise {'ValueError': ValueError, 'TypeError': TypeError, 'ImportError': ImportError}[kind](message)
        raise RuntimeError(f'exporting {type(agent).__name__} through TensorFlow failed: {lines[-1]}')
    return path

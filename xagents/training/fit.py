"""One training run of an agent: refuse outputs that cannot be written, build the built-in callbacks, then drive
the :class:`xagents.training.run.Run` (collect -> update -> the run's events) until a stop rule holds.

:meth:`xagents.agent.base.BaseAgent.fit` is the face (its signature is the one source of the run's settings,
their defaults and the command line's training flags); :func:`train` is what it does.
"""
from __future__ import annotations

import logging
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
from keras import ops

from xagents.training.callbacks import (Callback, Checkpoints, Evaluation, Plateau, ProgressBar, ProgressLines, Saves,
                                        StallHint, TensorBoard, Wandb)
from xagents.training.run import Run
from xagents.storage.atomic import check_writable, remove_stale_temporaries
from xagents.storage.checkpoints import NonFiniteError, read_checkpoint
from xagents.storage.saved import latest_save, read_manifest
from xagents.utils.memory import check_fits
from xagents.utils.console import console_logging, interruption_dropped, stop_if_interruption_dropped
from xagents.envs.creation import env_settings
from xagents.utils.extras import require, require_tensorflow
from xagents.storage.history import History, check_identity
from xagents.storage.locks import OutputLocks, lock_outputs

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent

logger = logging.getLogger('xagents')


def train(agent: BaseAgent, settings: SimpleNamespace) -> Run:
    """Train ``agent`` with the run ``settings`` (the arguments of ``fit``); return the finished run."""
    check_settings(agent, settings)
    if not settings.quiet:
        console_logging()
    if settings.history_checkpoint and settings.history_checkpoint != agent.history.path:
        agent.history = History(settings.history_checkpoint, agent.identity())  # every finished episode, across runs
    run = Run(agent, built_in_callbacks(agent, settings) + list(settings.callbacks), settings.target_reward,
              settings.max_steps, settings.stop_on, settings.total, settings.reward_buffer_size, settings.log_frequency)
    locks = check_outputs(agent, settings)
    if settings.save_dir:
        agent.written_save_dirs.add(os.path.realpath(settings.save_dir))
    try:
        run.start(settings.ray_address)  # starts the workers, if any
        try:
            stop_if_interruption_dropped()  # one that Python dropped while the command started up
            while run.reason is None:  # collect and update; the run records, logs, saves and judges
                metrics = {name: ops.convert_to_numpy(value) for name, value in agent.train_once().items()}
                check_finite_metrics(metrics, agent.steps)
                if agent.lr_decay_steps:
                    agent.update_learning_rates()
                run.end_round(metrics, agent.take_episodes())
                stop_if_interruption_dropped()  # its KeyboardInterrupt landed in a hook that Python dropped it from
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM on the command line: the run ends in order, its files written
            interruption_dropped()  # (this one was not)
            run.stop(f'Interrupted at step {agent.steps}')
            raise
        finally:
            run.finish()
    finally:
        agent.stop_workers()
        locks.release()
    return run


def check_settings(agent: BaseAgent, settings: SimpleNamespace) -> None:
    """Refuse settings that contradict each other or the agent, before anything is made."""
    name, roles = type(agent).__name__, agent.model_roles
    per_transition = getattr(getattr(agent, 'buffer', None), 'bytes_per_transition', None)
    if per_transition and hasattr(agent, 'gradient_steps'):  # one sample serves every gradient step of a round
        sampled = agent.gradient_steps * agent.buffer_batch_size
        # The transitions twice (sampled, then as tensors), and their indices (int64) a few times over.
        check_fits(f'--gradient-steps {agent.gradient_steps:,} of --buffer-batch-size {agent.buffer_batch_size:,}: '
                   f'a sample of {sampled:,} transitions', sampled * (2 * per_transition + 32),
                   'lower --gradient-steps or --buffer-batch-size')
    if settings.stop_on == 'eval' and not settings.eval_frequency:
        raise ValueError('stop_on eval needs an eval_frequency')
    if settings.eval_frequency and not (env_settings(agent.envs) or {}).get('env_id'):
        raise ValueError("eval_frequency evaluates on envs made from the agent's env id, and this agent's envs "
                         'were not made from one: build it with from_env, or evaluate after fit (evaluate(agent, env))')
    if (settings.save_frequency or settings.save_replay_buffer) and not settings.save_dir:
        raise ValueError('save_frequency and save_replay_buffer need a save_dir')
    if settings.save_replay_buffer and not hasattr(agent, 'buffer'):
        raise ValueError(f'{name} keeps no replay buffer to save')
    if settings.checkpoints is not None and len(settings.checkpoints) != len(roles):
        raise ValueError(f'{name} trains {len(roles)} model(s) ({", ".join(roles)}), got '
                         f'{len(settings.checkpoints)} checkpoint path(s)')
    if settings.ray_address and not agent.workers:
        raise ValueError('ray_address is where workers run: give the agent workers too')
    if settings.tensorboard:
        require('tensorboard', 'tensorboard', 'writing TensorBoard summaries')  # before anything is made
        require_tensorflow('writing TensorBoard summaries')


def built_in_callbacks(agent: BaseAgent, settings: SimpleNamespace) -> list[Callback]:
    """The callbacks ``fit`` makes from its settings, in their documented order (the user's come after)."""
    quiet = settings.quiet
    callbacks: list[Callback] = [Checkpoints(settings.checkpoints), ProgressLines(quiet=quiet)]
    if not quiet:
        callbacks.append(ProgressBar())
    if settings.eval_frequency:
        callbacks.append(Evaluation(settings.eval_frequency, settings.eval_episodes, quiet=quiet))
    if settings.monitor_session:
        callbacks.append(Wandb(settings.monitor_session))
    if settings.tensorboard:
        callbacks.append(TensorBoard(settings.tensorboard))
    if settings.save_dir:
        callbacks.append(Saves(settings.save_dir, settings.save_frequency, settings.save_keep,
                               settings.save_replay_buffer, quiet=quiet))
    if settings.plateau_start_steps is not None:
        callbacks.append(Plateau(settings.plateau_start_steps, settings.plateau_reduce_factor,
                                 settings.plateau_reduce_patience, settings.early_stop_patience))
    if not quiet and agent.generic_env:
        callbacks.append(StallHint(agent.generic_env))  # last: its line, when it has one, ends the output
    return callbacks


def check_outputs(agent: BaseAgent, settings: SimpleNamespace) -> OutputLocks:
    """Refuse, before a run touches anything, outputs it could not write, outputs another live run is writing
    and files it would overwrite; remove temporary files that a killed write of them left.

    Returns:
        The outputs' locks, held until the run releases them (see :mod:`xagents.storage.locks`).
    """
    checkpoints, history, tensorboard, save_dir = (settings.checkpoints or (), settings.history_checkpoint,
                                                   settings.tensorboard, settings.save_dir)
    outputs = [path for path in [*checkpoints, history, tensorboard, save_dir] if path]
    real = [os.path.realpath(path) for path in outputs]
    for path in outputs:
        if real.count(os.path.realpath(path)) > 1:
            raise ValueError(f'expected a path of its own for each output (checkpoints, history, tensorboard, '
                             f'save_dir), got {path} twice')
    for directory in (tensorboard, save_dir):
        if directory:
            check_writable(directory, directory=True)
    for path in [*checkpoints, history]:
        if path:
            check_writable(path)
    locks = lock_outputs([*(('checkpoint', path) for path in checkpoints), ('history', history),
                          ('tensorboard', tensorboard), ('save_dir', save_dir)])
    try:
        check_existing(agent, checkpoints, save_dir)
    except BaseException:
        locks.release()
        raise
    for path in [*checkpoints, history]:
        if path:  # a temporary file of another live run's write is not stale: removed under the lock only
            for name in remove_stale_temporaries(path):
                logger.info('Removed %s, left by an interrupted write', name)
    return locks


def check_existing(agent: BaseAgent, checkpoints, save_dir: str | None) -> None:
    """Refuse files of an earlier run that this one would overwrite, unless it resumes from them."""
    started, loaded = agent.training_started, agent.weights_loaded
    resume = (f'resume its run from a save of {save_dir} (--weights {os.path.join(save_dir, "step-...")}) with the '
              'same outputs' if save_dir else None)
    if len(agent.history.saved) and not started and not loaded:
        raise ValueError(f'history {agent.history.path} exists: {resume or "load its weights to resume (--weights)"}'
                         ', or choose another history file')
    resuming_a_save = any(os.path.isdir(path) for path in loaded)
    for path in checkpoints:
        if os.path.exists(path) and path not in loaded and not started:
            if resuming_a_save:  # a run of every output resumes from its save: its best weights go on
                check_identity(path, read_checkpoint(path).identity, agent.identity())
                continue
            raise ValueError(f'checkpoint {path} exists: {resume or "pass it as weights to resume"}, or choose '
                             'another path')
    if save_dir and saves_of_another_run(agent, save_dir):
        raise ValueError(f'save_dir {save_dir} holds the saves of another run: resume from one (--weights '
                         f'{os.path.join(save_dir, "step-...")}), or choose another directory')


def saves_of_another_run(agent: BaseAgent, save_dir: str) -> bool:
    """Whether ``save_dir`` holds saves that ``agent`` neither wrote (earlier fits) nor was loaded from: its
    periodic saves and best-eval would replace them."""
    if not os.path.isdir(save_dir) or os.path.realpath(save_dir) in agent.written_save_dirs:
        return False
    if not any(name.startswith('step-') or name.startswith('best-eval') for name in os.listdir(save_dir)):
        return False
    inside = os.path.realpath(save_dir) + os.sep
    if any(os.path.realpath(path).startswith(inside) for path in agent.weights_loaded):
        return False
    return not continues_saves(agent, save_dir)


def continues_saves(agent: BaseAgent, save_dir: str) -> bool:
    """Whether the weights ``agent`` was loaded from (a run's final ``--checkpoints``, written after its newest save)
    go on from the newest save of ``save_dir``: the same agent, env and spaces, at its step or later.

    Raises:
        ValueError: they are of the same agent and env but older than that save, whose run they cannot go on.
    """
    newest = latest_save(save_dir)
    if newest is None or not agent.weights_loaded:
        return False
    try:
        manifest = read_manifest(newest)
    except ValueError:  # a damaged save is no run's continuation
        return False
    if identity_words(manifest['identity']) != identity_words(agent.identity()):
        return False
    steps = [read_checkpoint(path).steps for path in agent.weights_loaded if os.path.isfile(path)]
    if not steps or None in steps:
        return False
    if min(steps) < manifest['steps']:
        raise ValueError(f'the weights loaded ({", ".join(agent.weights_loaded)}) are at step {min(steps):,}, '
                         f'before {newest}, the newest save of save_dir {save_dir}, which would then hold saves out '
                         f'of order: resume from that save (--weights {newest}), or choose another directory')
    return True


def identity_words(identity: dict) -> dict[str, str]:
    """An identity (agent, env, spaces) as checkpoints record it: its values in words, those unknown left out."""
    return {name: str(value) for name, value in identity.items() if value is not None}


def check_finite_metrics(metrics: dict, steps: int) -> None:
    """Stop training when an update's losses are no longer finite (a nan from the envs is caught before): the
    weights have diverged, and the files on disk stay those of the last good point."""
    for name, value in metrics.items():
        if not np.isfinite(value):
            raise NonFiniteError(f'the update at env step {steps:,} made {name} {float(value)}: the weights diverged '
                                 '(a lower learning rate may help)')

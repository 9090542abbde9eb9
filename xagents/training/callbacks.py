"""Run callbacks: what ``fit`` does besides training, and the hooks users add (``fit(callbacks=[...])``).

``fit`` builds its own from its arguments and the agent's settings, in this order: checkpoints and
history file, progress lines, progress bar, evaluation, metric sinks (wandb, TensorBoard),
whole-agent saves, plateau rules; then the user's. A callback overrides the events it needs (see
:class:`xagents.training.run.Run`) and stops training by returning False from ``on_round`` or ``on_episode``.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Callable, Sequence

import gymnasium as gym
import numpy as np

from xagents.training.run import format_reward
from xagents.storage.atomic import remove_stale_temporaries
from xagents.storage.checkpoints import write_checkpoint
from xagents.storage.saved import (MANIFEST, STEP_SAVE, read_manifest, read_score, remove_interrupted_save,
                                   write_score)

if TYPE_CHECKING:
    from xagents.training.run import Episode, Run

logger = logging.getLogger('xagents')


class Callback:
    """Hooks into a training run; every event does nothing unless overridden."""

    def on_start(self, run: Run) -> None:
        """Training is about to start (the envs are reset, nothing trained yet)."""

    def on_episode(self, run: Run, episode: Episode) -> bool | None:
        """An episode finished and is recorded; return False to stop training."""

    def on_progress(self, run: Run) -> None:
        """``log_frequency`` more episodes finished: the progress-line clock."""

    def on_round(self, run: Run) -> bool | None:
        """A round (collection and update) ended; return False to stop training."""

    def on_metrics(self, run: Run, metrics: dict[str, float]) -> None:
        """Metrics were logged at the run's current step."""

    def on_stop(self, run: Run) -> None:
        """Training ended (``run.reason`` says why: a stop rule, or an interruption by Ctrl-C or SIGTERM; None after
        an error)."""


class Checkpoints(Callback):
    """The run's files: the best models (``checkpoints``) and the history, in that order.

    When the best reward rises the models are copied in memory; the copy, then the history, are written at most
    every ``interval`` seconds and at the end, so a history on disk always has its weights beside it, and a kill
    loses at most the last ``interval`` seconds of a run (writing each rise of a short run's best would take
    longer than its training). The best reward waits for a full window of episodes; until then the latest
    weights are kept (no best yet, and a run can resume from them).
    """

    def __init__(self, paths: Sequence[str] | None = None, interval: float = 2.0) -> None:
        """
        Args:
            paths: Where the models go, one per model role (none: the history only).
            interval: Seconds between writes of the files (the last one is written at the end).
        """
        self.paths, self.saved_best = list(paths or ()), -np.inf
        self.interval, self.written = interval, -np.inf
        self.pending: dict[str, dict[str, np.ndarray]] = {}  # path: arrays, copied, not yet written

    def on_start(self, run: Run) -> None:
        self.saved_best = run.best_reward if run.games else -np.inf  # a resumed best is saved already

    def keep(self, run: Run) -> None:
        """Copy the models when the best reward rose (before a full window: the latest models)."""
        if self.paths and (run.best_reward > self.saved_best or run.games and not run.window_full):
            self.pending = run.agent.model_checkpoints(self.paths)
            self.saved_best = run.best_reward

    def write(self, run: Run, now: bool = False) -> None:
        """Write the copied models, then the history, if ``interval`` seconds passed since the last write (or
        ``now``)."""
        if not now and time.perf_counter() - self.written < self.interval:
            return
        for path, arrays in self.pending.items():
            write_checkpoint(path, arrays)
        self.pending = {}
        run.history.flush()
        self.written = time.perf_counter()

    def on_progress(self, run: Run) -> None:
        self.keep(run)
        self.write(run)

    def on_round(self, run: Run) -> None:
        if self.paths and run.best_reward > self.saved_best:
            self.keep(run)
        self.write(run)

    def on_stop(self, run: Run) -> None:
        self.write(run, now=True)  # what was kept (a failing copy below leaves these files the last good ones)
        self.keep(run)
        self.write(run, now=True)
        if not self.paths or run.window_full:
            return
        if not run.games:
            logger.info('No episode finished: no weights written to %s', ' '.join(self.paths))
        else:
            logger.info('%d of the %d episodes a best mean reward needs finished: %s holds the latest weights, not a '
                        'best (train longer, or lower --reward-buffer-size)', len(run.reward_buffer),
                        run.reward_buffer.maxlen, ' '.join(self.paths))


class ProgressLines(Callback):
    """Every ``log_frequency`` episodes and at the end, the episode and loss metrics (to the metric
    sinks) and, unless ``quiet``, a progress line; then why training stopped."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.last_line: tuple[int, int] | None = None  # (games, steps) of the last line

    def on_progress(self, run: Run) -> None:
        self.last_line = (run.games, run.steps)
        metrics = {'mean_reward': run.mean_reward, 'best_reward': run.best_reward,
                   'episode_reward': run.reward_buffer[-1] if run.reward_buffer else float('nan'),
                   'games': run.games, 'steps_per_second': run.speed,
                   **{name: float(value) for name, value in run.metrics.items()}}
        run.log_metrics(metrics)
        if self.quiet:
            return
        logger.info('time %s  steps %d  games %d  speed %.0f steps/s  mean reward %s  best reward %s',
                    time.strftime('%H:%M:%S', time.gmtime(run.elapsed)), run.steps, run.games, run.speed,
                    format_reward(run.mean_reward), format_reward(run.best_reward))

    def on_stop(self, run: Run) -> None:
        if self.last_line != (run.games, run.steps):  # not the line just written again
            self.on_progress(run)
        if run.reason and not self.quiet:
            logger.info(run.reason)


class StallHint(Callback):
    """When a run on generic defaults (no preset names its env) spends its step budget with its mean reward flat,
    a last line names the settings that matter most for the agent and its action space, and the ``tune`` command
    that searches them. Flat: the last quarter of the run's episodes scored less than a tenth of the episodes'
    spread of scores above the first quarter (both need 5 episodes at least)."""

    # What to search first, by agent family (and action space): flag, then tune's MIN MAX or choices.
    SETTINGS = {
        'on_policy': (('--lr', '1e-5 1e-2'), ('--n-steps', '8,32,128,512,2048'), ('--entropy-coef', '1e-5 1e-1')),
        'on_policy_box': (('--lr', '1e-5 1e-2'), ('--n-steps', '8,32,128,512,2048'), ('--lam', '0.8 0.99')),
        'dqn': (('--lr', '1e-5 1e-2'), ('--epsilon-decay-steps', '1000 100000'),
                ('--target-update-interval', '100 10000')),
        'off_policy': (('--lr', '1e-5 1e-2'), ('--buffer-batch-size', '64,128,256,512'), ('--tau', '0.001 0.05')),
    }

    def __init__(self, env_id: str | None) -> None:
        self.env_id, self.scores = env_id, []

    def on_episode(self, run: Run, episode) -> None:
        self.scores.append(float(episode.score))

    def flat(self) -> bool:
        quarter = len(self.scores) // 4
        if quarter < 5:
            return False
        scores = np.asarray(self.scores)
        rise = scores[-quarter:].mean() - scores[:quarter].mean()
        return bool(rise <= 0.1 * scores.std())

    def settings(self, agent) -> tuple[tuple[str, str], ...]:
        names = agent.parameter_names()
        if 'epsilon_decay_steps' in names:  # DQN and QR-DQN
            return self.SETTINGS['dqn']
        if 'buffer_batch_size' in names and 'n_steps' not in names:  # SAC, TD3, DDPG (not ACER)
            return self.SETTINGS['off_policy']
        box = isinstance(agent.envs.single_action_space, gym.spaces.Box)
        settings = self.SETTINGS['on_policy_box' if box or 'entropy_coef' not in names else 'on_policy']  # TRPO
        return tuple(setting for setting in settings if setting[0][2:].replace('-', '_') in names)

    def on_stop(self, run: Run) -> None:
        if not (self.env_id and run.budget_spent and self.flat()):
            return
        agent = run.agent
        name, settings = type(agent).__name__.lower(), self.settings(agent)
        flags = ', '.join(flag for flag, _ in settings)
        search = ' '.join(f'{flag} {values}' for flag, values in settings)
        logger.info('The mean reward stayed flat on %s\'s generic defaults (no preset names %s): %s matter most '
                    'here; search them with: xagents tune %s --env %s %s', type(agent).__name__, self.env_id, flags,
                    name, self.env_id, search)


class ProgressBar(Callback):
    """A tqdm bar of env steps, drawn only on a terminal; log lines print above it."""

    def __init__(self) -> None:
        self.bar = self.redirect = None

    def on_start(self, run: Run) -> None:
        if not sys.stderr.isatty():
            return
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        self.bar = tqdm(total=run.max_steps, initial=run.steps, unit='step', leave=False, dynamic_ncols=True)
        self.redirect = logging_redirect_tqdm()
        self.redirect.__enter__()

    def on_round(self, run: Run) -> None:
        if self.bar is not None:
            self.bar.update(run.steps - self.bar.n)

    def on_stop(self, run: Run) -> None:
        if self.bar is not None:
            self.bar.close()
            self.redirect.__exit__(None, None, None)
            self.bar = self.redirect = None


class Evaluation(Callback):
    """Every ``frequency`` env steps, ``episodes`` deterministic episodes (``run.eval_reward``)."""

    def __init__(self, frequency: int, episodes: int, quiet: bool = False) -> None:
        self.frequency, self.episodes, self.quiet, self.due = frequency, episodes, quiet, 0

    def on_start(self, run: Run) -> None:
        self.due = run.steps + self.frequency

    def on_round(self, run: Run) -> None:
        if run.steps < self.due:
            return
        self.due += self.frequency
        result = run.agent.evaluate(episodes=self.episodes)
        run.eval_reward = result.mean
        success = {} if result.success_rate is None else {'eval_success': result.success_rate}
        run.log_metrics({'eval_reward': run.eval_reward, **success})
        if not self.quiet:
            logger.info('steps %d  eval reward %.2f (%d deterministic episodes)%s', run.steps, run.eval_reward,
                        self.episodes, '' if result.success_rate is None else f'  success {result.success_rate:.2f}')


class Saves(Callback):
    """Whole-agent saves (``agent.save``) into ``directory``: every ``frequency`` env steps and when training ends
    (its target reached, its steps done, stopped early, or interrupted by Ctrl-C or SIGTERM; not after an error) as
    ``step-N``, the newest ``keep`` kept; and, when the run evaluates, the best-evaluated agent as ``best-eval``
    (Stable-Baselines3's ``CheckpointCallback`` and ``EvalCallback``'s best model, RL Zoo's final model).

    Raises:
        ValueError: (when built) ``best-eval.json``, the score of ``best-eval``, is damaged.
    """

    def __init__(self, directory: str, frequency: int | None = None, keep: int = 3,
                 include_buffer: bool = False, quiet: bool = False) -> None:
        self.directory, self.frequency, self.keep, self.include_buffer = directory, frequency, keep, include_buffer
        self.quiet, self.due, self.best_eval, self.saved_step = quiet, 0, -np.inf, None
        self.score_path = os.path.join(directory, 'best-eval.json')  # best-eval's score, across runs
        # A resumed run replaces best-eval only with a better agent. Without best-eval's manifest (a kill
        # in its first save), the score is of no agent; both are written whole, so either one damaged is refused.
        score = read_score(self.score_path) if os.path.exists(self.score_path) else -np.inf
        best = os.path.join(directory, 'best-eval')
        if os.path.exists(os.path.join(best, MANIFEST)):
            try:
                read_manifest(best)
            except ValueError as error:
                raise ValueError(f'{error}, or delete {best} and {self.score_path} to let the next evaluation save '
                                 'both again') from None
            self.best_eval = score

    def on_start(self, run: Run) -> None:
        self.due, self.saved_step = run.steps + (self.frequency or 0), run.steps  # (what it was loaded from, if any)
        removed = remove_stale_temporaries(self.score_path)  # what a kill during a save left
        for name in os.listdir(self.directory) if os.path.isdir(self.directory) else ():
            if (name == 'best-eval' or name.startswith('step-')) and os.path.isdir(os.path.join(self.directory, name)):
                removed += remove_interrupted_save(os.path.join(self.directory, name))
        for path in removed:
            logger.info('Removed %s, left by an interrupted save', path)
        if not self.quiet:
            logger.info('Saving the agent into %s', save_times(self.directory, self.frequency, self.keep,
                                                                any(isinstance(callback, Evaluation)
                                                                    for callback in run.callbacks)))

    def on_round(self, run: Run) -> None:
        if run.eval_reward > self.best_eval:
            self.best_eval = run.eval_reward
            # The score first: a kill between the two leaves a score no lower than the agent saved.
            write_score(self.score_path, run.eval_reward, run.steps)
            run.agent.save(os.path.join(self.directory, 'best-eval'), self.include_buffer)
        if self.frequency and run.steps >= self.due:
            self.due = run.steps + self.frequency
            self.save(run)

    def on_stop(self, run: Run) -> None:
        if run.reason is not None and run.steps != self.saved_step:  # ended, not failed; and trained since a save
            path = self.save(run)
            if not self.quiet:
                logger.info('Saved the agent as %s', path)

    def save(self, run: Run) -> str:
        """Save the agent as ``step-N``, then delete the oldest others beyond ``keep``; return its path."""
        name = f'step-{run.steps:012d}'
        run.agent.save(os.path.join(self.directory, name), self.include_buffer)
        self.saved_step = run.steps
        others = sorted(other for other in os.listdir(self.directory) if STEP_SAVE.match(other) and other != name)
        for old in others[:max(len(others) - (self.keep - 1), 0)]:
            shutil.rmtree(os.path.join(self.directory, old))
        return os.path.join(self.directory, name)


def save_times(directory: str, frequency: int | None, keep: int, evaluating: bool = False) -> str:
    """When saves into ``directory`` happen, as the line at a run's start says it: '``directory`` as step-N every
    10000 steps and when training ends (the newest 3 kept); the best-evaluated one as best-eval'."""
    every = f'every {frequency} steps and ' if frequency else ''
    kept = f' (the newest {keep} kept)' if frequency else ''
    best = f'; the best-evaluated one as {os.path.join(directory, "best-eval")}' if evaluating else ''
    return f'{directory} as step-N {every}when training ends{kept}{best}'


class OnStart(Callback):
    """Calls ``function(run)`` when training starts, once the run's checks passed (the command line says there where
    the run's results go)."""

    def __init__(self, function: Callable[[Run], None]) -> None:
        self.function = function

    def on_start(self, run: Run) -> None:
        self.function(run)


class Plateau(Callback):
    """After ``start_steps``, multiply the learning rate by ``factor`` when the best mean reward has not
    risen for ``patience`` progress lines in a row; stop after ``stop_patience`` such cuts in a row.

    One clock, progress lines once a full window of episodes has finished: at each, the best mean reward
    either rose since the previous line (the counts restart) or did not (one more line on the plateau).
    """

    def __init__(self, start_steps: int, factor: float, patience: int, stop_patience: int) -> None:
        self.start_steps, self.factor, self.patience, self.stop_patience = start_steps, factor, patience, stop_patience
        self.best = -np.inf
        self.lines = self.cuts = 0

    def on_start(self, run: Run) -> None:
        self.best, self.lines, self.cuts = run.best_reward, 0, 0

    def on_progress(self, run: Run) -> None:
        improved, self.best = run.best_reward > self.best, run.best_reward
        if run.steps < self.start_steps or self.cuts >= self.stop_patience or not run.window_full:
            return  # (no best before a full window of episodes: nothing to judge a plateau by)
        if improved:
            self.lines = self.cuts = 0
            return
        self.lines += 1
        if self.lines < self.patience:
            return
        self.lines, self.cuts = 0, self.cuts + 1
        run.agent.lr_factor *= self.factor
        run.agent.update_learning_rates()
        logger.info('Plateau: learning rate reduced by a factor of %s', self.factor)
        if self.cuts >= self.stop_patience:
            run.stop(f'Early stopping after {self.cuts} plateaus; best mean reward {format_reward(run.best_reward)}')


class Wandb(Callback):
    """Log metrics to a Weights & Biases run (works offline with ``WANDB_MODE=offline``)."""

    def __init__(self, session: str) -> None:
        self.session, self.run = session, None

    def on_start(self, run: Run) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get('WANDB_PROJECT', 'xagents'), name=self.session,
                              config=run.agent.config(), reinit='finish_previous')

    def on_metrics(self, run: Run, metrics: dict[str, float]) -> None:
        if self.run is not None:
            self.run.log(metrics, step=run.steps)

    def on_stop(self, run: Run) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class TensorBoard(Callback):
    """Write metrics as TensorBoard scalar summaries under ``logdir``."""

    def __init__(self, logdir: str) -> None:
        self.logdir, self.writer = logdir, None

    def on_start(self, run: Run) -> None:
        import tensorflow as tf

        self.writer = tf.summary.create_file_writer(self.logdir)

    def on_metrics(self, run: Run, metrics: dict[str, float]) -> None:
        import tensorflow as tf

        if self.writer is not None:
            with self.writer.as_default(step=run.steps):
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)

    def on_stop(self, run: Run) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


# Stable-Baselines3's callback hooks: a callback defining one expects it called, and xagents calls none of them.
SB3_HOOKS = ('_on_step', 'on_step', '_on_rollout_start', '_on_rollout_end', 'on_rollout_start', 'on_rollout_end',
             '_on_training_start', '_on_training_end', 'on_training_start', 'on_training_end', '_init_callback',
             'init_callback')
CALLBACK_WAY = ('xagents callbacks subclass xagents.training.callbacks.Callback and stop training by returning False '
                'from on_round(run) or on_episode(run, episode) (Stable-Baselines3\'s _on_step ~ on_round, '
                'self.num_timesteps ~ run.steps)')


def checked_callbacks(callbacks: Callback | Sequence[Callback]) -> list[Callback]:
    """``fit``'s ``callbacks`` (a list, or one as Stable-Baselines3's ``callback=`` takes it) as a list, each refused
    in one line before training if the run would never call it: not a :class:`Callback` (a function, a
    Stable-Baselines3 callback), or one whose hooks are Stable-Baselines3's (``_on_step``)."""
    callbacks = [callbacks] if isinstance(callbacks, Callback) or not isinstance(callbacks, Iterable) else list(callbacks)
    for callback in callbacks:
        if isinstance(callback, Callback):
            hooks = [hook for hook in SB3_HOOKS if hasattr(callback, hook)]
            if hooks:
                raise TypeError(f'{type(callback).__name__} defines {hooks[0]}, which xagents never calls: '
                                f'{CALLBACK_WAY}')
            continue
        if isinstance(callback, type):
            got = (f'the class {callback.__name__} (pass an instance: {callback.__name__}())'
                   if issubclass(callback, Callback) else f'the class {callback.__name__}')
        elif callable(callback) and not any(hasattr(callback, hook) for hook in SB3_HOOKS):
            got = f'the function {getattr(callback, "__name__", repr(callback))}'
        else:
            hooks = [hook for hook in SB3_HOOKS if hasattr(callback, hook)]
            got = type(callback).__name__ + (f', a Stable-Baselines3-style callback ({hooks[0]})' if hooks else '')
        raise TypeError(f'expected Callback instances in callbacks, got {got}: {CALLBACK_WAY}')
    return callbacks

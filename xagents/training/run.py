"""A training run: the state of one ``fit`` call, kept off the agent, and the events its callbacks hear.

The agent holds hyperparameters, models, its update and its envs (with the env steps taken so far);
a :class:`Run` holds what one ``fit`` call tracks: the episodes' mean and best reward, the evaluation
score, timers, why and when to stop, and the callbacks. Its episode statistics start from the
agent's history, so a second ``fit`` (or a resumed run) continues where the last one ended.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent
    from xagents.training.callbacks import Callback

logger = logging.getLogger('xagents')


class Episode(NamedTuple):
    """A finished episode: the game's score, the agent's env steps when it ended, and when (perf_counter)."""

    score: float
    step: int
    clock: float


class Run:
    """The state of one training run and the bus its callbacks listen on.

    Events, in order: ``on_start``; per round ``on_episode`` for each finished episode,
    ``on_progress`` every ``log_frequency`` episodes (the progress-line clock), then ``on_round``;
    ``on_metrics`` whenever metrics are logged; ``on_stop`` once. A callback stops the run by
    returning False from ``on_round`` or ``on_episode``, or by calling :meth:`stop` with a reason.
    """

    def __init__(self, agent: BaseAgent, callbacks: Sequence[Callback], target_reward: float | None = None,
                 max_steps: int | None = None, stop_on: str = 'train', total: bool = False,
                 reward_buffer_size: int = 100, log_frequency: int = 10) -> None:
        """Check the stopping rule; nothing starts until :meth:`start`.

        Args:
            agent: The agent trained.
            callbacks: What listens to the run's events, in the order they hear them.
            target_reward: Stop when the judged reward reaches it.
            max_steps: Stop once this run has taken this many env steps (summed over envs).
            total: Count max_steps over the agent's whole life (earlier fits, a resumed history).
            stop_on: Judge target_reward on the 'train' mean reward or the latest 'eval' reward.
            reward_buffer_size: Episodes averaged into the mean reward (and the best, once that many finished).
            log_frequency: Episodes between progress events.
        """
        if target_reward is None and max_steps is None:
            raise ValueError('expected target_reward or max_steps (or both), got neither')
        if stop_on not in ('train', 'eval'):
            raise ValueError(f"expected stop_on 'train' or 'eval', got {stop_on!r}")
        self.agent, self.callbacks = agent, list(callbacks)
        self.target_reward, self.max_steps, self.stop_on, self.total = target_reward, max_steps, stop_on, total
        self.reward_buffer: collections.deque[float] = collections.deque(maxlen=reward_buffer_size)
        self.log_frequency = log_frequency
        self.mean_reward = self.best_reward = self.eval_reward = -np.inf
        self.games = 0
        self.metrics: dict[str, float] = {}
        self.reason: str | None = None
        self.time_offset = self.start_time = 0.0
        self.start_steps = 0
        self.end_steps: int | None = None  # the agent's steps when the run finished

    def __repr__(self) -> str:
        state = self.reason or ('running' if self.end_steps is None else 'ended by an error')
        return (f'Run({type(self.agent).__name__}, steps={self.steps}, games={self.games}, '
                f'mean_reward={format_reward(self.mean_reward)}, best_reward={format_reward(self.best_reward)}, '
                f'eval_reward={format_reward(self.eval_reward)}: {state})')

    # ------------------------------------------------------------------------------ state
    @property
    def steps(self) -> int:
        """The agent's env steps (summed over envs): now, or when the run finished."""
        return self.agent.steps if self.end_steps is None else self.end_steps

    @property
    def history(self):
        return self.agent.history

    @property
    def elapsed(self) -> float:
        """Seconds of training, earlier runs of the same history included."""
        return self.time_offset + time.perf_counter() - self.start_time

    @property
    def speed(self) -> float:
        """Env steps per second in this run."""
        return (self.steps - self.start_steps) / max(time.perf_counter() - self.start_time, 1e-9)

    @property
    def window_full(self) -> bool:
        """Whether ``reward_buffer_size`` episodes have finished: the mean reward is judged from then on."""
        return len(self.reward_buffer) == self.reward_buffer.maxlen

    def stop(self, reason: str) -> None:
        """Ask the run to end after the current round (the first reason given is the one kept)."""
        self.reason = self.reason or reason

    # ------------------------------------------------------------------------------ the run
    def start(self, ray_address: str | None = None) -> None:
        """Take up the agent's history (resuming its step count when the history comes from an
        earlier process), start the envs (or the workers, on the Ray cluster at ``ray_address``), then tell
        the callbacks."""
        agent, frame = self.agent, self.agent.history.frame()
        if len(frame) and not agent.training_started:  # a history on disk: resume it
            if agent.steps:  # from a whole-agent save, at its step: later episodes were played by weights it lacks
                dropped = agent.history.rewind(agent.steps)
                if dropped:
                    logger.info('Resuming at step %d of the save: the %d episodes the history holds after it are '
                                'left out', agent.steps, dropped)
                frame = agent.history.frame()
            else:  # from best weights (--checkpoints): the step count goes on from the last episode
                agent.steps = int(frame['step'].iloc[-1])
        if len(frame):
            last = frame.iloc[-1]
            self.time_offset = float(last['time'])
            self.best_reward = float(frame['best_reward'].max())
            self.games = len(frame)
            self.reward_buffer.extend(frame['episode_reward'].iloc[-self.reward_buffer.maxlen:])
            self.mean_reward = float(np.mean(self.reward_buffer))
        agent.start_envs(ray_address=ray_address)
        self.start_time, self.start_steps = time.perf_counter(), agent.steps
        started = []
        try:
            for callback in self.callbacks:
                callback.on_start(self)
                started.append(callback)
        except BaseException:  # the ones that started release what they hold (a bar, a wandb run)
            self.callbacks = started
            self.finish()
            raise
        self._check_step_limits()  # a resumed agent may be past them already (total=True): no round then

    def end_round(self, metrics: dict[str, float], episodes: Sequence[Episode]) -> bool:
        """Take a round's update metrics and finished episodes; return whether training goes on."""
        self.metrics = metrics
        for episode in episodes:
            self._record(episode)
        for callback in self.callbacks:
            if callback.on_round(self) is False:
                self.stop(f'Stopped by {type(callback).__name__}')
        self._check_stop_rules()
        return self.reason is None

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Hand ``metrics`` to every callback that records them (wandb, TensorBoard)."""
        for callback in self.callbacks:
            callback.on_metrics(self, metrics)

    def finish(self) -> None:
        """Tell the callbacks the run ended (normally, stopped, or by an exception)."""
        for callback in self.callbacks:
            callback.on_stop(self)
        self.end_steps = self.agent.steps

    def _record(self, episode: Episode) -> None:
        """One finished episode. The best reward is the highest mean reward over a full window of
        ``reward_buffer_size`` episodes (as the target rule judges), so one lucky early episode is no best;
        the same in the progress line, the history's ``best_reward`` column, the checkpoints and on resume."""
        self.reward_buffer.append(episode.score)
        self.mean_reward = float(np.mean(self.reward_buffer))
        if self.window_full:
            self.best_reward = max(self.best_reward, self.mean_reward)
        self.games += 1
        elapsed = self.time_offset + episode.clock - self.start_time
        self.history.append(self.mean_reward, self.best_reward, episode.score, episode.step, elapsed)
        for callback in self.callbacks:
            if callback.on_episode(self, episode) is False:
                self.stop(f'Stopped by {type(callback).__name__}')
        if self.games % self.log_frequency == 0:
            for callback in self.callbacks:
                callback.on_progress(self)

    def _check_stop_rules(self) -> None:
        if self.target_reward is not None:
            if self.stop_on == 'eval':
                reached = self.eval_reward >= self.target_reward
            else:
                reached = self.window_full and self.mean_reward >= self.target_reward
            if reached:
                self.stop(f'Reward achieved in {self.steps} steps')
        self._check_step_limits()

    @property
    def budget_spent(self) -> bool:
        """Whether the run has taken its ``max_steps``."""
        counted = self.steps - (0 if self.total else self.start_steps)
        return self.max_steps is not None and counted >= self.max_steps

    def _check_step_limits(self) -> None:
        agent = self.agent
        if self.budget_spent:
            self.stop(f'Maximum steps ({self.max_steps}) reached; best mean reward {format_reward(self.best_reward)}')
        if agent.lr_decay_steps is not None and self.steps >= agent.lr_decay_steps:
            self.stop(f'Learning rate decayed to 0 at {agent.lr_decay_steps} steps; '
                      f'best mean reward {format_reward(self.best_reward)}')


def format_reward(value: float) -> str:
    return f'{value:.2f}' if np.isfinite(value) else 'n/a'

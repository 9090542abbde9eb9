"""Hindsight experience replay (Andrychowicz et al. 2017, https://arxiv.org/abs/1707.01495): a replay buffer that
replaces the desired goal of part of every sampled batch by a goal achieved later in the same episode.

Goal envs observe a Dict of ``observation``, ``achieved_goal`` and ``desired_goal`` and compute their reward from
goals alone, vectorised: ``compute_reward(achieved_goal, desired_goal, info)`` (Gymnasium-Robotics' interface,
:mod:`xagents.envs.goal_envs`). Nothing here imports TensorFlow.
"""
from __future__ import annotations

import logging
from typing import Callable

import gymnasium as gym
import numpy as np

from xagents.replay.buffers import ReplayBatch, ReplayBuffer
from xagents.envs.creation import EnvError, env_name, env_settings, make_env
from xagents.envs.goal_envs import check_goal_space

STRATEGIES = ('future', 'final', 'episode')
RewardFunction = Callable[[np.ndarray, np.ndarray, list], np.ndarray]
logger = logging.getLogger(__name__)


def goal_reward(envs: gym.vector.VectorEnv) -> RewardFunction:
    """The envs' ``compute_reward``, callable in this process without stepping anything: that of the first env of
    a sync vector env, else of one local env made like them (an async vector env keeps its envs in subprocesses),
    kept unstepped for the buffer's life.

    Raises:
        ValueError: the envs are async and were not made from an id, or their env has no ``compute_reward``.
    """
    if isinstance(envs, gym.vector.SyncVectorEnv):
        env = envs.envs[0]
    elif env_settings(envs) is not None:
        env = make_env(**env_settings(envs))
    else:
        raise ValueError('her calls the env\'s compute_reward in the learner\'s process, and these async envs were not '
                         'made from an id: pass sync envs, or an env id')
    compute = getattr(env.unwrapped, 'compute_reward', None)
    if not callable(compute):
        raise ValueError(f'her expects a goal env with a vectorised compute_reward(achieved_goal, desired_goal, info) '
                         f'method, and {env_name(envs)} has none')
    return compute


class HerReplayBuffer(ReplayBuffer):
    """Uniform replay whose batches are relabelled with hindsight goals (Stable-Baselines3's ``HerReplayBuffer``).

    Storage is :class:`ReplayBuffer`'s (one time column per env, final observations in their own slot), on a goal
    env's Dict space, one-step returns. Each slot also records which episode of its env column it belongs to, and
    each episode the stream positions of its first and last transitions.

    As Stable-Baselines3's, it samples only transitions of episodes that have ended (terminated, truncated by a
    time limit, or cut by :meth:`truncate`) and are still stored whole: an env's episode in progress, and an
    episode whose first transitions the ring has overwritten, are never sampled, relabelled or not. So ``final``
    is an episode's true last step and ``future`` draws from its whole remainder. Before any episode has ended
    there is nothing to sample: :meth:`can_sample` is False (an agent's learning waits), :meth:`sample` refuses.
    An episode longer than an env's column (``capacity // n_envs`` transitions) can never be stored whole: the
    first such one is warned about.

    ``sample`` draws uniformly among those transitions, then gives the first ``int(goals / (goals + 1) *
    batch_size)`` transitions of every minibatch a new desired goal, in the observation and the next observation:
    the achieved goal of the next observation of the transition at step ``t'`` of the same episode, with ``t'``
    drawn uniformly from ``t`` (the sampled transition's own step, included as Stable-Baselines3 does) to the
    episode's last step for ``future``, the last step for ``final``, any step for ``episode``. A time-limit
    truncation's last transition (its true final observation kept) is relabelled as any other. Relabelling works
    on raw values: the agent normalises the batch afterwards, relabelled goals as stored ones.

    The reward of a relabelled transition is ``compute_reward(next achieved_goal, new desired_goal, infos)``,
    one call for the whole batch (``infos``: one empty dict per transition, as Stable-Baselines3 passes them
    without ``copy_info_dict``), checked where it enters: a ``compute_reward`` that raises, or returns other than
    one finite number per goal pair, is an :class:`~xagents.envs.creation.EnvError` naming it. Its discount is the
    stored transition's, as Stable-Baselines3 keeps the env's ``dones`` for relabelled transitions: ``gamma``, or
    0 where the env terminated the episode (a time limit still bootstraps), whatever the new goal.
    """

    def __init__(self, capacity: int, n_envs: int, observation_space: gym.spaces.Dict, action_space: gym.Space,
                 compute_reward: RewardFunction, goals: int = 4, strategy: str = 'future', gamma: float = 0.99,
                 seed: int | np.random.Generator | None = None) -> None:
        """Allocate the storage.

        Args:
            capacity: See ``ReplayBuffer``.
            n_envs: See ``ReplayBuffer``.
            observation_space: A goal env's Dict space (see :func:`check_goal_space`).
            action_space: See ``ReplayBuffer``.
            compute_reward: The env's vectorised ``compute_reward(achieved_goal, desired_goal, infos)``.
            goals: Relabelled transitions per real one (Stable-Baselines3's ``n_sampled_goal``).
            strategy: Where new goals come from: ``future``, ``final`` or ``episode``.
            gamma: See ``ReplayBuffer``.
            seed: See ``ReplayBuffer``.
        """
        keys = check_goal_space(observation_space)
        if not isinstance(goals, (int, np.integer)) or goals < 1:
            raise ValueError(f'expected her_goals >= 1, got {goals!r}')
        if strategy not in STRATEGIES:
            raise ValueError(f'expected her_strategy {", ".join(STRATEGIES)}, got {strategy!r}')
        super().__init__(capacity, n_envs, observation_space, action_space, 1, gamma, seed)
        self.compute_reward, self.goals, self.strategy = compute_reward, int(goals), strategy
        achieved, desired = (keys.keys[keys.names.index(name)] for name in ('achieved_goal', 'desired_goal'))
        self._achieved = slice(achieved.offset, achieved.offset + achieved.size)
        self._desired = slice(desired.offset, desired.offset + desired.size)
        shape = (self._rows, n_envs)
        self._episodes = np.zeros(shape, np.int64)  # the episode (of its env column) each transition belongs to
        # Indexed by episode % rows (fewer episodes than rows have a transition stored in a column): stream
        # positions of each episode's first and last (so far) transitions.
        self._episode_first = np.zeros(shape, np.int64)
        self._episode_last = np.zeros(shape, np.int64)
        self._episode_count = np.full(n_envs, -1, np.int64)  # each env's current episode
        self._outgrown: list[int] = []  # the env warned of an episode longer than its column (not saved)
        self._waited: list[int] = []  # the step can_sample first said no at (not saved)

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage and episode arrays."""
        return super().nbytes + self._episodes.nbytes + self._episode_first.nbytes + self._episode_last.nbytes

    def add(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_observations: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            columns: slice | None = None, action_masks: np.ndarray | None = None,
            next_action_masks: np.ndarray | None = None) -> None:
        """Store one vector step (see ``ReplayBuffer.add``) and extend each env's current episode with it."""
        envs = self._envs if columns is None else self._envs[columns]
        positions, new = self._positions[envs].copy(), self._episode_ended[envs].copy()
        super().add(observations, actions, rewards, next_observations, terminated, truncated, columns,
                    action_masks, next_action_masks)
        self._episode_count[envs] += new
        episodes = self._episode_count[envs]
        slots = episodes % self._rows
        self._episodes[positions % self._rows, envs] = episodes
        self._episode_first[slots, envs] = np.where(new, positions, self._episode_first[slots, envs])
        self._episode_last[slots, envs] = positions
        first = self._episode_first[slots, envs]
        outgrown = envs[self._stamps[first % self._rows, envs] != first]
        if len(outgrown) and not self._outgrown:
            self._outgrown.append(int(outgrown[0]))
            logger.warning('her samples whole ended episodes, and the episode of env %d has run past the %s '
                           'transitions its column of the replay buffer holds (buffer_max_size // n_envs): it will '
                           'never be sampled; raise buffer_max_size, or end episodes sooner (a time limit)',
                           int(outgrown[0]), f'{self._rows - 1:,}')

    def ended_whole(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Whether the transitions at ``rows``, ``envs`` belong to episodes that have ended and are still stored
        whole (their first transition not yet overwritten: the ring overwrites in stream order)."""
        episodes = self._episodes[rows, envs]
        running = (episodes == self._episode_count[envs]) & ~self._episode_ended[envs]
        first = self._episode_first[episodes % self._rows, envs]
        return ~running & (self._stamps[first % self._rows, envs] == first)

    def can_sample(self) -> bool:
        """Whether an episode has ended and is stored whole: :meth:`sample` has transitions to draw from. The first
        False is logged: an agent's learning waits there."""
        finished = self._episode_count - ~self._episode_ended  # each env's newest ended episode (-1: none)
        first = self._episode_first[finished % self._rows, self._envs]
        ready = bool(((finished >= 0) & (self._stamps[first % self._rows, self._envs] == first)).any())
        if not ready and not self._waited:
            self._waited.append(self.steps)
            logger.info('her samples ended episodes and none has ended in %s env steps: learning waits for one',
                        f'{self.steps:,}')
        return ready

    def _window(self, rows: np.ndarray, envs: np.ndarray):
        window = super()._window(rows, envs)
        return window._replace(ok=window.ok & self.ended_whole(rows, envs))

    def sample(self, batch_size: int, batches: int = 1) -> ReplayBatch:
        """Sample transitions of ended episodes (see the class doc), the first ``goals / (goals + 1)`` of each
        minibatch relabelled.

        Raises:
            ValueError: no episode has ended yet (or none is stored whole).
            EnvError: the env's ``compute_reward`` raised, or returned other than one finite number per goal pair.
        """
        self._check_batch_size(batch_size, batches)
        if not self.can_sample():
            raise ValueError(f'her samples transitions of ended episodes, and none of the {len(self):,} stored '
                             f'transitions belongs to one yet: add steps until an episode ends')
        batch = super().sample(batch_size, batches)
        relabelled = int(self.goals / (self.goals + 1) * batch_size)
        return self.relabel(batch, np.flatnonzero(np.arange(batch_size * batches) % batch_size < relabelled))

    def relabel(self, batch: ReplayBatch, chosen: np.ndarray) -> ReplayBatch:
        """``batch`` with the transitions at ``chosen`` given hindsight goals and their rewards (in place)."""
        if not len(chosen):  # a minibatch too small for goals / (goals + 1) of it to be one transition
            return batch
        rows, envs = batch.indices[chosen] // self.n_envs, batch.indices[chosen] % self.n_envs
        steps = self.goal_steps(rows, envs)
        goals = self._store.parts['achieved_goal'].data[(steps + 1) % self._rows, envs]  # of each next observation
        flat = goals.reshape(len(chosen), -1)
        batch.observations[chosen, self._desired] = flat
        batch.next_observations[chosen, self._desired] = flat
        achieved = batch.next_observations[chosen, self._achieved].reshape(goals.shape).astype(goals.dtype)
        batch.rewards[chosen] = self.relabelled_rewards(achieved, goals)
        return batch

    def relabelled_rewards(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """``compute_reward(achieved, desired, infos)`` for ``n`` goal pairs, checked where it enters: ``(n,)``
        float32, else an :class:`EnvError` naming ``compute_reward``, what was wrong and the env step."""
        n, owner = len(achieved), getattr(self.compute_reward, '__self__', None)
        spec = getattr(owner, 'spec', None)
        name = spec.id if spec is not None else type(owner).__name__ if owner is not None else 'the goal env'
        where = f'{name} in compute_reward at env step {self.steps:,}'
        try:
            rewards = self.compute_reward(achieved, desired, [{}] * n)  # (no per-sample loop)
        except Exception as error:
            raise EnvError(f'{where}: {type(error).__name__}: {error}') from error
        try:
            array = np.asarray(rewards)
        except ValueError:  # a ragged sequence
            array = np.asarray(None)
        if array.shape not in ((n,), (n, 1)):
            shape = (f'an array shaped {array.shape}' if isinstance(rewards, np.ndarray) or array.ndim
                     else f'{type(rewards).__name__} {rewards!r}'[:60])
            raise EnvError(f'{where}: expected one reward per goal pair, shaped ({n},) for {n} pairs (her calls a '
                           f'vectorised compute_reward(achieved_goal, desired_goal, info), goals shaped '
                           f'{achieved.shape}), got {shape}')
        if array.dtype.kind not in 'biuf':
            raise EnvError(f'{where}: expected numbers, got {array.dtype} values such as {array.flat[0]!r}')
        array = array.reshape(n).astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(array))
        if len(bad):
            i = int(bad[0])
            raise EnvError(f'{where}: returned {array[i]} for achieved_goal {achieved[i].tolist()} and desired_goal '
                           f'{desired[i].tolist()} ({len(bad)} of {n} rewards not finite)')
        return array

    def goal_steps(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Stream positions of the transitions whose next achieved goals become the new goals of the transitions
        at ``rows``, ``envs`` (of ended episodes stored whole), by ``strategy``."""
        slots = self._episodes[rows, envs] % self._rows
        last = self._episode_last[slots, envs]
        if self.strategy == 'final':
            return last
        if self.strategy == 'future':
            return self.rng.integers(self._stamps[rows, envs], last + 1)
        return self.rng.integers(self._episode_first[slots, envs], last + 1)

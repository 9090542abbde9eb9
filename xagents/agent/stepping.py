"""EnvStepping: how an agent steps its vector envs while training: the first reset, each vector step (actions
converted for the env, every value checked where it enters, finished episodes noted with the game's own score)
the action masks the envs give, and the bootstrap of a truncated episode's last reward."""
from __future__ import annotations

import logging
import time
from typing import Callable

import gymnasium as gym
import numpy as np

from xagents.training.distributed import WorkerPool
from xagents.training.run import Episode
from xagents.envs.creation import EnvError, EpisodeScores, check_finite, env_call, env_name
from xagents.envs.masks import (WHO_MASKS, MaskError, MaskReader, as_mask, check_masks, final_masks, mask_segments,
                                 mask_size, unused_masks)
from xagents.envs.observations import ObservationError, observation_problem
from xagents.envs.spaces import one_line

logger = logging.getLogger('xagents')


class EnvStepping:
    """The env-stepping part of :class:`xagents.agent.base.BaseAgent` (which sets ``envs``, ``steps``, ``seed``,
    ``workers``, ``training_started`` and ``finished_episodes``)."""

    def start_envs(self, seed: int | None = None, ray_address: str | None = None) -> None:
        """Reset the envs (seeded: ``seed``, else the agent's) before the first run; later runs go on where the
        last one stopped. With ``workers``, start them instead (each fit starts its own, on the Ray cluster at
        ``ray_address`` or a local one)."""
        if self.workers:
            if self.pool is None:
                self.pool = WorkerPool(self, self.workers, ray_address)
            self.training_started = True
        elif not self.training_started:
            self.episode_scores = EpisodeScores(self.envs)
            with env_call(self.envs, 'reset', self.steps):
                observations, info = self.envs.reset(seed=self.seed if seed is None else seed)
            self.check_observations(observations, 'reset')
            check_finite(self.envs, self.steps, **self.named_observations(observations, 'observation'))
            self.observations = self.entered(observations, 'reset')
            self.read_masks = MaskReader(self.envs)
            self.take_masks(info)
            self.training_started = True

    def step_envs(self, actions: np.ndarray):
        """Send the agent's ``actions`` (see :meth:`env_actions`) to every env; note finished episodes.

        Returns:
            ``(next_observations, rewards, terminated, truncated, final_observations)`` where
            ``final_observations`` equals ``next_observations`` except for envs whose episode
            ended, which hold the episode's true final observation. The action masks of both, when the envs
            give them, are left in ``masks`` and ``final_step_masks`` (see :meth:`take_masks`).
        """
        with env_call(self.envs, 'step', self.steps):
            next_observations, rewards, terminated, truncated, info = self.envs.step(self.env_actions(actions))
        self.steps += self.envs.num_envs
        self.check_observations(next_observations, 'step')
        dones = terminated | truncated
        ended = np.flatnonzero(dones)
        keys = self.dict_observations
        if keys is not None:  # checked per key (an error names it), then packed
            finals = next_observations
            if len(ended):
                finals = {name: np.array(value) for name, value in next_observations.items()}
                for env, final in zip(ended, info['final_obs'][ended]):
                    for name in finals:
                        finals[name][env] = final[name]
            check_finite(self.envs, self.steps, **self.named_observations(finals, 'observation'), reward=rewards,
                         **(self.named_observations(next_observations, 'reset observation') if len(ended) else {}))
            next_observations = self.entered(next_observations, 'step')
            final_observations = self.entered(finals, 'step') if len(ended) else next_observations
            return self.noted(next_observations, rewards, terminated, truncated, final_observations, info)
        final_observations = next_observations
        if len(ended):
            final_observations = next_observations.copy()
            final_observations[ended] = np.stack(info['final_obs'][ended])
        check_finite(self.envs, self.steps, observation=final_observations, reward=rewards,
                     **({'reset observation': next_observations} if dones.any() else {}))
        return self.noted(next_observations, rewards, terminated, truncated, final_observations, info)

    def check_observations(self, observations, call: str) -> None:
        """Refuse a vector env's batch of Box observations of another shape than ``(n_envs, *space)``, or not of
        numbers, in one :class:`EnvError` naming ``call`` and the env step (envs made by ``create_envs`` check each
        env's first, :class:`~xagents.envs.observations.CheckedObservations`; Dict ones are checked as packed)."""
        if self.dict_observations is not None:
            return
        expected = (self.envs.num_envs, *self.envs.single_observation_space.shape)
        if type(observations) is np.ndarray and observations.shape == expected and observations.dtype.kind in 'biuf':
            return
        problem = observation_problem(observations, gym.spaces.Box(-np.inf, np.inf, expected), 'observations')
        if problem:
            raise EnvError(f'{env_name(self.envs)} in {call} at env step {self.steps:,}: {problem} (n_envs x '
                           f'{self.envs.single_observation_space.shape})')

    def entered(self, observations, call: str) -> np.ndarray:
        """:meth:`encoded`, a Dict batch that does not fit its space (a Discrete key out of range) being an
        :class:`EnvError` naming ``call``, the env step and the key."""
        try:
            return self.encoded(observations, 'env')
        except ObservationError as error:
            raise EnvError(f'{env_name(self.envs)} in {call} at env step {self.steps:,}: {error}') from None

    def noted(self, next_observations, rewards, terminated, truncated, final_observations, info) -> tuple:
        """:meth:`step_envs`'s results, after noting the action masks and the episodes the step finished."""
        dones = terminated | truncated
        self.take_masks(info, dones)
        _, scores, _ = self.episode_scores.update(rewards, dones, info)
        if len(scores):
            now = time.perf_counter()
            self.finished_episodes.extend(Episode(float(score), self.steps, now) for score in scores)
        return next_observations, rewards, terminated, truncated, final_observations

    def named_observations(self, observations, name: str) -> dict[str, np.ndarray]:
        """A batch of observations for :func:`check_finite`: one array, or one per key of a Dict
        (``observation['position']``), so that an error names the key."""
        if isinstance(observations, dict):
            return {f'{name}[{key!r}]': np.asarray(value) for key, value in observations.items()}
        return {name: observations}

    def take_masks(self, info: dict, dones: np.ndarray | None = None) -> None:
        """Note the action masks a reset or step gave with ``info`` (see :mod:`xagents.envs.masks`): ``masks``, of
        the observations it returned, and ``final_step_masks``, of a step's final observations. Both stay None
        when the envs offer none, masking is off (``action_masks=False``) or the agent does not mask (which it
        says once, at the first reset, when the envs offer masks).

        Raises:
            EnvError: a mask is not one boolean (or 0/1) per action, or allows no action.
        """
        if not self.action_masks:
            return
        space = self.envs.single_action_space
        segments = mask_segments(space)
        if not self.masks_actions or segments is None:
            if dones is None and self.read_masks.offered(info):
                logger.warning(unused_masks(env_name(self.envs), type(self).__name__, space))
            return
        try:
            masks = self.read_masks(info)
            finals = masks if masks is None or dones is None else final_masks(masks, info, dones)
        except MaskError as error:
            raise EnvError(f'{env_name(self.envs)} at env step {self.steps:,}: {error}') from None
        if masks is not None:
            problem = check_masks(masks, self.envs.num_envs, segments)
            if problem:
                raise EnvError(f'{env_name(self.envs)} at env step {self.steps:,}: {problem}')
        self.masks = masks
        self.final_step_masks = finals

    def mask_reader(self, envs: gym.vector.VectorEnv | gym.Env) -> Callable[[dict], np.ndarray | None]:
        """What reads the action masks of ``envs`` (or a single env) from a reset's or step's info for :meth:`act`
        (evaluation, play): a :class:`~xagents.envs.masks.MaskReader` whose faults (a mask that is not one boolean
        per action, or allows none) are an :class:`~xagents.envs.creation.EnvError`, or None for every info when
        the agent acts without masks."""
        space = envs.single_action_space if isinstance(envs, gym.vector.VectorEnv) else envs.action_space
        if not (self.action_masks and self.masks_actions and mask_size(space) is not None):
            return lambda info: None
        reader, segments = MaskReader(envs), mask_segments(space)

        def read(info: dict) -> np.ndarray | None:
            try:
                masks = reader(info)
            except MaskError as error:
                raise EnvError(f'{env_name(envs)}: {error}') from None
            problem = masks is not None and check_masks(masks, len(masks), segments)
            if problem:
                raise EnvError(f'{env_name(envs)}: {problem}')
            return masks
        return read

    def checked_masks(self, masks, batch: int) -> np.ndarray:
        """``masks`` given for ``batch`` observations (``(n,)`` for one) as ``(batch, n)`` booleans, or a one-line
        ValueError (:class:`~xagents.envs.masks.MaskError`): masks that are not booleans or 0/1, of another
        shape, allowing no action, or given to an agent or action space that takes none."""
        space = self.envs.single_action_space
        segments = mask_segments(space)
        if not self.masks_actions or segments is None:
            raise MaskError(f'{type(self).__name__} on {one_line(space)} takes no action mask: {WHO_MASKS}')
        size = int(segments.sum())
        try:
            single = batch == 1 and np.ndim(masks) == 1
        except (ValueError, TypeError):  # ragged lists: as_mask names them
            single = False
        masks = as_mask(masks, (size,) if single else (batch, size), "predict's action_mask").reshape(batch, size)
        problem = check_masks(masks, batch, segments)
        if problem:
            raise MaskError(problem)
        return masks

    def bootstrapped(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                     finals: np.ndarray) -> np.ndarray:
        """``rewards`` plus ``gamma * V(final observation)`` where a time limit cut the episode short: a
        truncation is no terminal state (Pardo et al. 2018, https://arxiv.org/abs/1712.00378). Agents
        that learn from rollouts call it with their ``forward`` returning ``(..., values)``."""
        bootstrap = truncated & ~terminated
        if not bootstrap.any():
            return rewards
        return rewards + self.gamma * bootstrap * self.final_values(finals)

    def final_values(self, finals: np.ndarray) -> np.ndarray:
        """Values ``(B,)`` of a step's final observations (what :meth:`bootstrapped` adds)."""
        return self.forward(self.normalized(finals))[1]

    def take_episodes(self) -> list[Episode]:
        """The episodes finished since the last call: what a round's collection hands its run."""
        episodes, self.finished_episodes = self.finished_episodes, []
        return episodes

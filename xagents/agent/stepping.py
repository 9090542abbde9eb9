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
from xagents.utils.envs import EnvError, EpisodeScores, check_finite, env_call, env_name
from xagents.utils.masks import MaskReader, check_masks, final_masks, mask_segments, mask_size

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
            check_finite(self.envs, self.steps, **self.named_observations(observations, 'observation'))
            self.observations = self.encoded(observations)
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
            next_observations = keys.pack(next_observations)
            final_observations = keys.pack(finals) if len(ended) else next_observations
            return self.noted(next_observations, rewards, terminated, truncated, final_observations, info)
        final_observations = next_observations
        if len(ended):
            final_observations = next_observations.copy()
            final_observations[ended] = np.stack(info['final_obs'][ended])
        check_finite(self.envs, self.steps, observation=final_observations, reward=rewards,
                     **({'reset observation': next_observations} if dones.any() else {}))
        return self.noted(next_observations, rewards, terminated, truncated, final_observations, info)

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
        """Note the action masks a reset or step gave with ``info`` (see :mod:`xagents.utils.masks`): ``masks``, of
        the observations it returned, and ``final_step_masks``, of a step's final observations. Both stay None
        when the envs offer none, masking is off (``action_masks=False``) or the agent does not mask."""
        segments = mask_segments(self.envs.single_action_space)
        if not self.action_masks or segments is None or not self.masks_actions and dones is not None:
            return
        masks = self.read_masks(info)
        if masks is not None and not self.masks_actions:  # (read at the first reset only, to say so)
            logger.warning('%s offers action masks, which %s does not use: it may send actions the env forbids',
                           env_name(self.envs), type(self).__name__)
            return
        if masks is not None:
            problem = check_masks(masks, self.envs.num_envs, segments)
            if problem:
                raise EnvError(f'{env_name(self.envs)} at env step {self.steps:,}: {problem}')
        self.masks = masks
        self.final_step_masks = masks if masks is None or dones is None else final_masks(masks, info, dones)

    def mask_reader(self, envs: gym.vector.VectorEnv | gym.Env) -> Callable[[dict], np.ndarray | None]:
        """What reads the action masks of ``envs`` (or a single env) from a reset's or step's info for :meth:`act`:
        a :class:`~xagents.utils.masks.MaskReader`, or None for every info when the agent acts without masks."""
        space = envs.single_action_space if isinstance(envs, gym.vector.VectorEnv) else envs.action_space
        if self.action_masks and self.masks_actions and mask_size(space) is not None:
            return MaskReader(envs)
        return lambda info: None

    def checked_masks(self, masks: np.ndarray, batch: int) -> np.ndarray:
        """``masks`` given for ``batch`` observations as ``(batch, n)`` booleans, or a one-line ValueError."""
        segments = mask_segments(self.envs.single_action_space)
        if not self.masks_actions or segments is None:
            raise ValueError(f'{type(self).__name__} on {self.envs.single_action_space} takes no action mask: '
                             'masks are for the Discrete actions of PPO, A2C, TRPO, DQN and SAC and the '
                             'MultiDiscrete actions of PPO, A2C and TRPO')
        masks = masks.reshape(1, -1) if masks.ndim == 1 and batch == 1 else masks
        problem = check_masks(masks.astype(bool), batch, segments)
        if problem:
            raise ValueError(problem)
        return masks.astype(bool)

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

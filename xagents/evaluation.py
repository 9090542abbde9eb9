"""EvaluationResult: play whole episodes with an agent and report each one's return and length."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from xagents.utils.envs import EpisodeScores, as_vector_env, create_envs, settings_for
from xagents.utils.validation import validated

if TYPE_CHECKING:
    from xagents.base import BaseAgent


@dataclasses.dataclass(frozen=True, repr=False)
class EvaluationResult:
    """Per-episode returns (the games' own scores) and lengths (env steps) of an evaluation.

    Unpacks as ``mean, std = result``, the pair Stable-Baselines3's ``evaluate_policy`` returns.
    """

    returns: np.ndarray
    lengths: np.ndarray

    def __iter__(self):
        return iter((self.mean, self.std))

    def __repr__(self) -> str:
        return (f'EvaluationResult(mean={self.mean:.2f}, std={self.std:.2f}, episodes={len(self.returns)}, '
                f'mean_length={np.mean(self.lengths):.1f})')

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def __str__(self) -> str:
        return (f'{self.mean:.2f} ± {self.std:.2f} over {len(self.returns)} episodes '
                f'(length {np.mean(self.lengths):.1f} ± {np.std(self.lengths):.1f})')


@validated
def evaluate(
    agent: BaseAgent,
    env: str | gym.Env | gym.vector.VectorEnv | None = None,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
) -> EvaluationResult:
    """Play ``episodes`` whole episodes with ``agent`` and return their returns and lengths.

    Args:
        agent: A trained (or loaded) agent; its observation normalisation is applied, not updated.
        env: An env id (made as the agent's envs were: Atari preprocessing...), a ``gym.Env`` or a
            vector env; default: the agent's own env id. Ids get one env per episode.
        episodes: Number of episodes; a vector env of n envs plays ``(episodes + i) // n`` on env i,
            so short episodes are not favoured (as Stable-Baselines3's ``evaluate_policy``).
        deterministic: Act with the policy's mode (greedy) rather than sampling or exploring.
        seed: Seed of the first reset (env i gets seed + i); default: the agent's seed + 10,000.

    Returns:
        The per-episode returns and lengths, in the order the episodes ended.
    """
    envs, owned = _evaluation_envs(agent, env, episodes)
    if seed is None and agent.seed is not None:
        seed = agent.seed + 10_000
    try:
        n = envs.num_envs
        targets = np.array([(episodes + i) // n for i in range(n)])
        counts = np.zeros(n, np.int64)
        returns, lengths = [], []
        scores = EpisodeScores(envs)
        observations = envs.reset(seed=seed)[0]
        while (counts < targets).any():
            observations, rewards, terminated, truncated, info = envs.step(agent.act(observations, deterministic))
            ended, ended_returns, ended_lengths = scores.update(rewards, terminated | truncated, info)
            for index, score, length in zip(ended, ended_returns, ended_lengths):
                if counts[index] < targets[index]:
                    counts[index] += 1
                    returns.append(score)
                    lengths.append(length)
    finally:
        if owned:
            envs.close()
    return EvaluationResult(np.asarray(returns, np.float64), np.asarray(lengths, np.int64))


def _evaluation_envs(agent: BaseAgent, env, episodes: int) -> tuple[gym.vector.VectorEnv, bool]:
    """The vector env to evaluate on and whether this module made it (and so closes it)."""
    if env is None or isinstance(env, str):
        return create_envs(n_envs=episodes, **settings_for(agent.envs, env)), True
    return as_vector_env(env), False  # the caller's env: the caller closes it

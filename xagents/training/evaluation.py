"""EvaluationResult: play whole episodes with an agent and report each one's return and length."""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from xagents.envs.creation import EpisodeScores, as_vector_env, close_envs, create_envs, env_call, env_spec, settings_for
from xagents.envs.goal_envs import success_key
from xagents.envs.masks import mask_kwargs
from xagents.networks.recurrence import memory_kwargs
from xagents.utils.validation import validated

logger = logging.getLogger('xagents')
STEP_LIMIT = 100_000  # evaluation steps of an episode in an env that sets no limit of its own

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent


@dataclasses.dataclass(frozen=True, repr=False)
class EvaluationResult:
    """Per-episode returns (the games' own scores) and lengths (env steps) of an evaluation, and whether each
    succeeded where the env says (``info['is_success']`` at an episode's last step, as Gymnasium-Robotics' goal
    envs report it, or ``info['success']`` as its PointMaze does; None for envs that do not).

    Unpacks as ``mean, std = result``, the pair Stable-Baselines3's ``evaluate_policy`` returns.
    """

    returns: np.ndarray
    lengths: np.ndarray
    successes: np.ndarray | None = None

    def __iter__(self):
        return iter((self.mean, self.std))

    def __repr__(self) -> str:
        success = '' if self.success_rate is None else f', success_rate={self.success_rate:.2f}'
        return (f'EvaluationResult(mean={self.mean:.2f}, std={self.std:.2f}, episodes={len(self.returns)}, '
                f'mean_length={np.mean(self.lengths):.1f}{success})')

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    @property
    def success_rate(self) -> float | None:
        """The fraction of episodes that succeeded (None: the env reports no success)."""
        return None if self.successes is None else float(np.mean(self.successes))

    def __str__(self) -> str:
        success = '' if self.success_rate is None else f', success {self.success_rate:.0%}'
        return (f'{self.mean:.2f} ± {self.std:.2f} over {len(self.returns)} episodes '
                f'(length {np.mean(self.lengths):.1f} ± {np.std(self.lengths):.1f}{success})')


@validated
def evaluate(
    agent: BaseAgent,
    env: str | gym.Env | gym.vector.VectorEnv | None = None,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
    max_episode_steps: int | None = None,
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
        max_episode_steps: Cut an episode after this many steps, with a warning; default: the env's own
            limit, or 100,000 steps for an env that sets none, so that episodes that never end (a policy that
            stands still) cannot hang an evaluation.

    Returns:
        The per-episode returns, lengths and successes (where the env reports ``info['is_success']``), in the
        order the episodes ended (a cut episode counts with the return it had, as no success).
    """
    envs, owned, limit, why = _evaluation_envs(agent, env, episodes, max_episode_steps)
    if seed is None and agent.seed is not None:
        seed = agent.seed + 10_000
    try:
        n = envs.num_envs
        targets = np.array([(episodes + i) // n for i in range(n)])
        counts = np.zeros(n, np.int64)
        returns, lengths, successes = [], [], []
        scores = EpisodeScores(envs)
        read_masks = agent.mask_reader(envs)  # the action masks the env gives, when the agent acts within them
        memory = agent.new_memory(n)  # a recurrent policy's state per env
        with env_call(envs, 'reset (evaluation)', None):
            observations, info = envs.reset(seed=seed)
        masks = read_masks(info)
        while (counts < targets).any():
            with env_call(envs, 'step (evaluation)', None):
                actions = agent.act(agent.encoded(observations), deterministic, **mask_kwargs(masks),
                                    **memory_kwargs(memory))
                observations, rewards, terminated, truncated, info = envs.step(actions)
            masks = read_masks(info)
            if memory:
                memory.advance(terminated | truncated)
            ended, ended_returns, ended_lengths = scores.update(rewards, terminated | truncated, info)
            cut = scores.lengths >= limit if limit and not scores.recorded else None
            if cut is not None and cut.any():  # an env of the user's: cut here, the return so far counts
                cut_envs, cut_returns, cut_lengths = scores.cut(cut)
                ended, ended_returns, ended_lengths = (np.concatenate(pair) for pair in (
                    (ended, cut_envs), (ended_returns, cut_returns), (ended_lengths, cut_lengths)))
                with env_call(envs, 'reset (evaluation)', None):
                    observations, reset_info = envs.reset(options={'reset_mask': cut})
                if masks is not None:
                    masks[cut] = read_masks(reset_info)[cut]
                if memory:
                    memory.starts[cut] = True
            succeeded = final_successes(info, ended)
            for index, score, length, success in zip(ended, ended_returns, ended_lengths, succeeded):
                if counts[index] < targets[index]:
                    counts[index] += 1
                    returns.append(score)
                    lengths.append(length)
                    successes.append(success)
    finally:
        if owned:
            close_envs(envs)
    if limit and np.any(np.asarray(lengths) >= limit):
        logger.warning('Evaluation cut %d of %d episodes at %s steps: %s', int(np.sum(np.asarray(lengths) >= limit)),
                       len(lengths), f'{limit:,}', why)
    reported = any(success is not None for success in successes)
    return EvaluationResult(np.asarray(returns, np.float64), np.asarray(lengths, np.int64),
                            np.asarray([bool(success) for success in successes]) if reported else None)


def final_successes(info: dict, ended: np.ndarray) -> list[bool | None]:
    """``info['is_success']`` (or ``info['success']``) of the last steps of the episodes of envs ``ended`` (False
    for one the env gave none at its end, a cut episode), or None for each when the step reports no success at all."""
    final = info.get('final_info') or {}
    key = success_key(final)
    if key is None:
        return [None] * len(ended)
    return list(np.asarray(final[key], bool)[ended] & np.asarray(final['_' + key], bool)[ended])


def _evaluation_envs(agent: BaseAgent, env, episodes: int, max_episode_steps: int | None
                     ) -> tuple[gym.vector.VectorEnv, bool, int | None, str]:
    """The vector env to evaluate on, whether this module made it (and so closes it), the step limit that
    evaluation itself applies (None where the env's own applies) and why, for the warning of a cut."""
    if max_episode_steps:
        why = 'max_episode_steps'
    else:
        why = 'the env sets no limit of its own (pass max_episode_steps to change it)'
    if env is None or isinstance(env, str):
        settings = settings_for(agent.envs, env)
        limit = max_episode_steps or (None if own_limit(settings) else STEP_LIMIT)
        if limit:  # a time limit inside the env, below its episode records: the game's score of a cut episode
            settings['env_kwargs'] = {**(settings.get('env_kwargs') or {}), 'max_episode_steps': limit}
        return create_envs(n_envs=episodes, **settings), True, limit, why
    envs = as_vector_env(env)  # the caller's env: the caller closes it
    if max_episode_steps or applies_time_limit(env):
        return envs, False, max_episode_steps, why
    spec_limit = getattr(getattr(env, 'spec', None), 'max_episode_steps', None)
    if spec_limit:  # a limit its spec names but no TimeLimit applies (an unwrapped env): the env's own limit
        return envs, False, spec_limit, "the env's spec sets this limit and no TimeLimit wrapper applies it"
    return envs, False, STEP_LIMIT, why


def own_limit(settings: dict) -> int | None:
    """The step limit of the envs ``settings`` make: a ``max_episode_steps`` among their env kwargs, or their spec's."""
    return (settings.get('env_kwargs') or {}).get('max_episode_steps') or env_spec(settings['env_id']).max_episode_steps


def applies_time_limit(env: gym.Env | gym.vector.VectorEnv) -> bool:
    """Whether ``env`` ends its episodes at a time limit itself: a TimeLimit wrapper on a ``gym.Env`` (on every env of
    a SyncVectorEnv), or, for a vector env whose envs cannot be seen (another process, C++), one its spec names."""
    if isinstance(env, gym.vector.SyncVectorEnv):
        return all(applies_time_limit(one) for one in env.envs)
    if isinstance(env, gym.vector.VectorEnv):
        return bool(getattr(getattr(env, 'spec', None), 'max_episode_steps', None))
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return True
        env = env.env
    return False

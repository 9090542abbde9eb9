"""Small envs whose optimum is known, for checking that an agent learns a kind of action space (as
Stable-Baselines3's ``IdentityEnvMultiDiscrete``), or needs memory, or reads a small picture. Importing this module
registers them::

    xagents train ppo --env xagents.envs.toy_envs:MatchTargets-v0
    xagents train ppo --env xagents.envs.toy_envs:MatchTargets-v0 --env-kwargs '{"action_type": "discrete"}'
    xagents train ppo --env xagents.envs.toy_envs:Recall-v0 --recurrent lstm
    xagents train ppo --env xagents.envs.toy_envs:CameraReach-v0
"""
from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

ACTION_TYPES = ('multi_discrete', 'discrete', 'multi_binary')


class MatchTargets(gym.Env):
    """Several choices at once, each with a target shown in the observation: the reward is the fraction of choices
    that hit their target.

    Each step draws a new target per choice ``i`` in ``[0, nvec[i])`` and shows them one-hot, concatenated
    (``sum(nvec)`` floats); the next step's reward is the fraction of choices equal to their target (shifted
    by ``start``). Episodes end after ``length`` steps, so the optimum scores ``length`` and choosing at
    random ``length * mean(1 / nvec)``. Each choice depends only on its own part of the observation, which a
    policy of independent choices can represent exactly.

    Args:
        nvec: Number of options of each choice.
        length: Steps per episode.
        action_type: ``multi_discrete`` (``MultiDiscrete(nvec, start=start)``), ``discrete`` (the same choices
            flattened to ``Discrete(prod(nvec))``, in ``np.ravel_multi_index`` order: the control) or
            ``multi_binary`` (``MultiBinary(len(nvec))``, every ``nvec[i]`` must be 2).
        start: Smallest value of each choice (``multi_discrete`` only).

    Raises:
        ValueError: an action outside the action space (an agent must send env-ready actions).
    """

    metadata = {'render_modes': []}

    def __init__(self, nvec: Sequence[int] = (3, 3, 3), length: int = 10, action_type: str = 'multi_discrete',
                 start: Sequence[int] | None = None, render_mode: str | None = None) -> None:
        if action_type not in ACTION_TYPES:
            raise ValueError(f'expected action_type {", ".join(ACTION_TYPES)}, got {action_type!r}')
        self.nvec, self.length, self.action_type = np.asarray(nvec, np.int64), length, action_type
        self.start = np.zeros_like(self.nvec) if start is None else np.asarray(start, np.int64)
        if action_type == 'multi_binary' and (self.nvec != 2).any():
            raise ValueError(f'expected nvec of 2s for multi_binary, got {list(nvec)}')
        if action_type != 'multi_discrete' and self.start.any():
            raise ValueError(f'start is for multi_discrete actions, got {action_type!r}')
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32)
        self.action_space = {
            'multi_discrete': lambda: gym.spaces.MultiDiscrete(self.nvec, start=self.start),
            'discrete': lambda: gym.spaces.Discrete(int(np.prod(self.nvec))),
            'multi_binary': lambda: gym.spaces.MultiBinary(len(self.nvec)),
        }[action_type]()
        self.offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        self.targets, self.t = np.zeros_like(self.nvec), 0

    @property
    def optimum(self) -> float:
        """The best episode score."""
        return float(self.length)

    def observe(self) -> np.ndarray:
        self.targets = self.np_random.integers(self.nvec)
        observation = np.zeros(self.observation_space.shape, np.float32)
        observation[self.offsets + self.targets] = 1.0
        return observation

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f'expected an action in {self.action_space}, got {action!r}')
        if self.action_type == 'discrete':
            choices = np.array(np.unravel_index(int(action), self.nvec))
        else:
            choices = np.asarray(action, np.int64) - self.start
        reward = float(np.mean(choices == self.targets))
        self.t += 1
        return self.observe(), reward, self.t >= self.length, False, {}


class Recall(gym.Env):
    """Remember a cue: the first observation shows one of ``cues`` one-hot, the next ``delay`` show nothing; the
    episode's last action scores 1 if it names the cue, 0 otherwise (earlier actions score nothing). The optimum
    is 1; a policy without memory sees the same empty observation whatever the cue, so it scores ``1 / cues`` at
    best.
    """

    metadata = {'render_modes': []}

    def __init__(self, cues: int = 2, delay: int = 2, render_mode: str | None = None) -> None:
        self.cues, self.delay = cues, delay
        self.observation_space = gym.spaces.Box(0.0, 1.0, (cues + 1,), np.float32)  # the cue, then "now act"
        self.action_space = gym.spaces.Discrete(cues)
        self.cue, self.t = 0, 0

    def observe(self) -> np.ndarray:
        observation = np.zeros(self.observation_space.shape, np.float32)
        if self.t == 0:
            observation[self.cue] = 1.0
        if self.t == self.delay:
            observation[-1] = 1.0
        return observation

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(self.cues)), 0
        return self.observe(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f'expected an action in {self.action_space}, got {action!r}')
        last = self.t == self.delay
        reward = float(last and int(action) == self.cue)
        self.t += 1
        return self.observe() if not last else np.zeros(self.observation_space.shape, np.float32), reward, last, False, {}


class CameraReach(gym.Env):
    """Head for a target seen only by a small camera: a Dict of a ``size`` x ``size`` x 3 uint8 picture and the
    agent's own position, two floats in [-1, 1].

    The picture is camera-like: a lit, noisy background (intensities about 40 to 140) with the target a bright red
    blob (up to about 250) centred on its cell. The agent moves one cell a step (Discrete(5): stay, right, left, down,
    up) and scores 1 for each move that brings it closer to the target, or for staying on it. Episodes last
    ``length`` steps from a random start, so the optimum is ``length`` and a random policy scores about a third of it.
    """

    metadata = {'render_modes': []}
    MOVES = np.array([(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)])

    def __init__(self, size: int = 16, length: int = 10, render_mode: str | None = None) -> None:
        self.size, self.length = size, length
        self.observation_space = gym.spaces.Dict({
            'camera': gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
            'position': gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        })
        self.action_space = gym.spaces.Discrete(len(self.MOVES))
        cells = np.arange(size)
        self.rows, self.columns = np.meshgrid(cells, cells, indexing='ij')
        self.light = 40 + 60 * (self.rows + self.columns)[..., None] / (2 * size) * np.array([1.0, 0.9, 0.7])
        self.agent, self.target, self.t = np.zeros(2, np.int64), np.zeros(2, np.int64), 0

    def observe(self) -> dict:
        blob = np.exp(-((self.columns - self.target[0]) ** 2 + (self.rows - self.target[1]) ** 2) / 2.0)
        picture = self.light + self.np_random.normal(0, 12, self.light.shape) + blob[..., None] * np.array(
            [200.0, 20.0, 10.0])
        position = (2 * self.agent / (self.size - 1) - 1).astype(np.float32)
        return {'camera': np.clip(picture, 0, 255).astype(np.uint8), 'position': position}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.agent, self.target = self.np_random.integers(0, self.size, 2), self.np_random.integers(0, self.size, 2)
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f'expected an action in {self.action_space}, got {action!r}')
        before = np.abs(self.agent - self.target).sum()
        self.agent = np.clip(self.agent + self.MOVES[int(action)], 0, self.size - 1)
        after = np.abs(self.agent - self.target).sum()
        self.t += 1
        return self.observe(), float(after < before or after == before == 0), False, self.t >= self.length, {}


gym.register('MatchTargets-v0', entry_point=MatchTargets)
gym.register('Recall-v0', entry_point=Recall)
gym.register('CameraReach-v0', entry_point=CameraReach)

"""Goal-conditioned envs for hindsight experience replay (Andrychowicz et al. 2017, https://arxiv.org/abs/1707.01495).

Each observes a Dict of ``observation``, ``achieved_goal`` and ``desired_goal`` and offers a vectorised
``compute_reward(achieved_goal, desired_goal, info)``, the interface of Gymnasium-Robotics' goal envs that
``--her`` relabels with. Importing this module (``xagents.envs.creation`` does) registers them::

    xagents train dqn --env BitFlipping-v0 --her true
    xagents train sac --env PointReach-v0 --her true

Gymnasium only: no TensorFlow here.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from xagents.envs.observations import DictObservations
from xagents.envs.spaces import one_line

GOAL_KEYS = ('observation', 'achieved_goal', 'desired_goal')
SUCCESS_KEYS = ('is_success', 'success')  # where goal envs report success in info, in the order they are read


def success_key(info: dict) -> str | None:
    """The key ``info`` reports a goal env's success under: ``is_success`` (Gymnasium-Robotics' Fetch and Hand
    envs, Stable-Baselines3's convention) or ``success`` (its PointMaze and AntMaze); None where neither is."""
    return next((key for key in SUCCESS_KEYS if key in info), None)


class BitFlipping(gym.Env):
    """The HER paper's bit-flipping task (its section 3.1): a state of ``n_bits`` bits and a target, both drawn
    uniformly at reset; action ``i`` flips bit ``i``. The reward is -1 at every step that leaves the state off
    the target and 0 at the step that reaches it, which ends the episode (terminated, as Stable-Baselines3's
    ``BitFlippingEnv``); an episode is cut (truncated) after ``n_bits`` steps, enough to reach any target.
    Random exploration almost never meets the target once ``n_bits`` passes ~15: DQN alone fails there,
    DQN with HER learns.

    Observations: ``observation`` and ``achieved_goal`` are the state, ``desired_goal`` the target, each
    ``MultiBinary(n_bits)``. ``info['is_success']``: the state equals the target.

    Args:
        n_bits: Number of bits (and steps per episode).
    """

    metadata = {'render_modes': []}

    def __init__(self, n_bits: int = 15, render_mode: str | None = None) -> None:
        if not isinstance(n_bits, (int, np.integer)) or n_bits < 1:
            raise ValueError(f'expected n_bits >= 1, got {n_bits!r}')
        self.n_bits = int(n_bits)
        bits = gym.spaces.MultiBinary(self.n_bits)
        self.observation_space = gym.spaces.Dict({'observation': bits, 'achieved_goal': bits, 'desired_goal': bits})
        self.action_space = gym.spaces.Discrete(self.n_bits)
        self.state = np.zeros(self.n_bits, np.int8)
        self.goal = np.zeros(self.n_bits, np.int8)
        self.t = 0

    def observe(self) -> dict[str, np.ndarray]:
        return {'observation': self.state.copy(), 'achieved_goal': self.state.copy(), 'desired_goal': self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self.t = 0
        return self.observe(), {'is_success': bool((self.state == self.goal).all())}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f'expected an action in {self.action_space}, got {action!r}')
        self.state[int(action)] ^= 1
        self.t += 1
        observation = self.observe()
        reward = float(self.compute_reward(observation['achieved_goal'], observation['desired_goal'], {}))
        success = reward == 0.0
        return observation, reward, success, self.t >= self.n_bits, {'is_success': success}

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info) -> np.ndarray:
        """-1 where the bits differ from the goal, 0 where they match: ``(...)`` float32 over leading axes."""
        return -np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1).astype(np.float32)


class PointReach(gym.Env):
    """A Fetch-like reach: a point in 3-D moved by velocity actions towards a goal, with FetchReach's sparse reward.

    Gymnasium-Robotics' ``FetchReach`` does not run beside MuJoCo 4 (what ``gymnasium[mujoco]`` installs): this
    keeps its scales without the arm. The point starts at the origin (FetchReach's gripper starts at a fixed
    place); the goal is drawn uniformly within 0.15 of it on each axis (FetchReach's ``target_range``); an
    action in ``[-1, 1]^3`` moves the point by ``0.05 * action`` (FetchReach scales its position control by
    0.05), inside the workspace ``[-0.3, 0.3]^3``. The reward is ``-(distance > 0.05)`` at every step
    (``distance_threshold``), ``info['is_success']`` is ``distance < 0.05``; nothing terminates, episodes are cut
    at 50 steps (the registered ``PointReach-v0`` time limit, FetchReach's).

    Observations: ``observation`` is the position and the last move (6 floats, as FetchReach gives the
    gripper's position and velocity), ``achieved_goal`` the position, ``desired_goal`` the goal (3 floats each).
    """

    metadata = {'render_modes': []}
    threshold = 0.05  # FetchReach's distance_threshold
    goal_range = 0.15  # FetchReach's target_range
    workspace = 0.3
    step_size = 0.05

    def __init__(self, render_mode: str | None = None) -> None:
        point = gym.spaces.Box(-self.workspace, self.workspace, (3,), np.float32)
        self.observation_space = gym.spaces.Dict({
            'observation': gym.spaces.Box(-self.workspace, self.workspace, (6,), np.float32),
            'achieved_goal': point, 'desired_goal': point})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.position = np.zeros(3, np.float32)
        self.move = np.zeros(3, np.float32)
        self.goal = np.zeros(3, np.float32)

    def observe(self) -> dict[str, np.ndarray]:
        return {'observation': np.concatenate([self.position, self.move]), 'achieved_goal': self.position.copy(),
                'desired_goal': self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = np.zeros(3, np.float32)
        self.move = np.zeros(3, np.float32)
        self.goal = self.np_random.uniform(-self.goal_range, self.goal_range, 3).astype(np.float32)
        return self.observe(), {'is_success': self.distance() < self.threshold}

    def distance(self) -> float:
        return float(np.linalg.norm(self.position - self.goal))

    def step(self, action):
        action = np.clip(np.asarray(action, np.float32).reshape(3), -1.0, 1.0)
        previous = self.position
        self.position = np.clip(previous + self.step_size * action, -self.workspace, self.workspace).astype(np.float32)
        self.move = self.position - previous
        observation = self.observe()
        reward = float(self.compute_reward(observation['achieved_goal'], observation['desired_goal'], {}))
        return observation, reward, False, False, {'is_success': self.distance() < self.threshold}

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info) -> np.ndarray:
        """-1 where the point is farther than 0.05 from the goal, else 0: ``(...)`` float32 over leading axes."""
        distance = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(distance > self.threshold).astype(np.float32)


gym.register('BitFlipping-v0', entry_point=BitFlipping)
gym.register('PointReach-v0', entry_point=PointReach, max_episode_steps=50)


def check_goal_space(space: gym.Space) -> DictObservations:
    """The packing of a goal env's observations, or a one-line ValueError saying why ``space`` is none.

    A goal space is a Dict with ``observation``, ``achieved_goal`` and ``desired_goal`` keys, the two goals
    vectors (Box or MultiBinary) of one shape: relabelling copies achieved goals into desired ones.
    """
    keys = DictObservations.of(space)
    if keys is None or not set(GOAL_KEYS) <= set(keys.names):
        raise ValueError(f'her expects goal-env observations, a Dict with keys {", ".join(GOAL_KEYS)} (as '
                         f'Gymnasium-Robotics envs, BitFlipping-v0 and PointReach-v0 give), got {one_line(space)}')
    achieved, desired = (keys.keys[keys.names.index(name)] for name in ('achieved_goal', 'desired_goal'))
    if achieved.kind != 'vector' or desired.kind != 'vector' or achieved.space.shape != desired.space.shape:
        raise ValueError(f'her expects achieved_goal and desired_goal to be vectors (Box or MultiBinary) of one shape, '
                         f'got {one_line(achieved.space)} and {one_line(desired.space)}')
    return keys

"""NumPy storage for experience: on-policy rollouts and off-policy replay.

Nothing here imports TensorFlow: buffers fill and sample NumPy arrays, agents turn
batches into tensors at the graph boundary.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class RolloutBuffer:
    """Preallocated ``(n_steps, n_envs, ...)`` arrays for one on-policy rollout.

    Row ``t`` holds what all envs saw and did at vector step ``t``; ``dones[t]`` says the
    episode ended after that step (terminated or truncated), ``rewards[t]`` already includes
    the bootstrapped value of a truncated episode's final observation.
    """

    def __init__(self, n_steps: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.Space) -> None:
        self.n_steps, self.n_envs = n_steps, n_envs
        shape = (n_steps, n_envs)
        self.observations = np.zeros(shape + observation_space.shape, observation_space.dtype)
        self.actions = np.zeros(shape + action_space.shape, action_space.dtype)
        self.rewards = np.zeros(shape, np.float32)
        self.dones = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.log_probs = np.zeros(shape, np.float32)

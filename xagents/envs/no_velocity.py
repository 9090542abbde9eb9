"""Classic-control tasks with their velocities hidden (partially observable: a policy needs memory to infer them),
registered as RL Zoo registers them, so that ``xagents train ppo --env CartPoleNoVel-v1 --recurrent lstm`` works::

    CartPoleNoVel-v1  MountainCarNoVel-v0  MountainCarContinuousNoVel-v0  PendulumNoVel-v1
    LunarLanderNoVel-v3  LunarLanderContinuousNoVel-v3
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

# Observation entries that are velocities, per base env id (RL Zoo's MaskVelocityWrapper).
VELOCITIES = {
    'CartPole-v1': (1, 3),  # cart velocity, pole angular velocity
    'MountainCar-v0': (1,),
    'MountainCarContinuous-v0': (1,),
    'Pendulum-v1': (2,),  # angular velocity (cos and sin of the angle stay)
    'LunarLander-v3': (2, 3, 5),  # x and y velocity, angular velocity
    'LunarLanderContinuous-v3': (2, 3, 5),
}


class MaskVelocity(gym.ObservationWrapper):
    """Zero the velocity entries of a classic-control observation (they stay in the space, always 0)."""

    def __init__(self, env: gym.Env, base: str) -> None:
        super().__init__(env)
        if base not in VELOCITIES:
            raise ValueError(f'MaskVelocity knows the velocities of {", ".join(VELOCITIES)}, got {base}')
        self.keep = np.ones(env.observation_space.shape, env.observation_space.dtype)
        self.keep[list(VELOCITIES[base])] = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.keep


def _masked(base: str, **kwargs) -> gym.Env:
    """``base`` unwrapped, its velocities masked (``gym.make`` of the NoVel id adds the time limit and checks)."""
    return MaskVelocity(gym.make(base, **kwargs).unwrapped, base)


for _base in VELOCITIES:
    _name, _version = _base.rsplit('-', 1)
    _spec = gym.spec(_base)
    gym.register(f'{_name}NoVel-{_version}', entry_point=_masked, kwargs={'base': _base},
                 max_episode_steps=_spec.max_episode_steps, reward_threshold=_spec.reward_threshold)

"""Well-known tasks under ids that no preset names (``Own/CartPole-v1``): what an agent's generic defaults meet on
a user's own env, for the ``defaults`` suite of ``xagents benchmark``. Each is its original env, time limit included;
``Own/DoorKey-5x5-v0`` is MiniGrid's DoorKey as a Dict of its image and direction (the mission text dropped, as
``FilterObservation`` gives it; needs ``pip install minigrid``). Importing this module registers them::

    xagents train ppo --env xagents.envs.unpreset:Own/CartPole-v1
"""
from __future__ import annotations

import gymnasium as gym

NAMESPACE = 'Own'
ORIGINALS = ('CartPole-v1', 'Acrobot-v1', 'MountainCar-v0', 'Pendulum-v1', 'MountainCarContinuous-v0',
             'LunarLander-v3', 'LunarLanderContinuous-v3', 'Taxi-v4', 'PointReach-v0', 'BitFlipping-v0')


def door_key(**kwargs) -> gym.Env:
    """MiniGrid's DoorKey-5x5 as a Dict of its 7x7x3 uint8 grid of ids and its Discrete(4) direction."""
    import minigrid  # noqa: F401  (registers MiniGrid's ids)

    return gym.wrappers.FilterObservation(gym.make('MiniGrid-DoorKey-5x5-v0', **kwargs), ['image', 'direction'])


def register() -> None:
    """Register ``Own/<id>`` for every original, with the original's entry point, time limit and settings."""
    import xagents.envs.goal_envs  # noqa: F401  (registers PointReach-v0 and BitFlipping-v0)

    for original in ORIGINALS:
        spec = gym.spec(original)
        gym.register(f'{NAMESPACE}/{original}', entry_point=spec.entry_point, max_episode_steps=spec.max_episode_steps,
                     reward_threshold=spec.reward_threshold, kwargs=dict(spec.kwargs))
    gym.register(f'{NAMESPACE}/DoorKey-5x5-v0', entry_point=door_key, max_episode_steps=None)


register()

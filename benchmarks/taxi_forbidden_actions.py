"""Forbidden actions sent to Taxi-v4 while PPO and DQN train 50,000 steps, with action masks and without (seed 0).

Each env counts the actions it gets that its last ``info['action_mask']`` forbade. Run: ``python
benchmarks/taxi_forbidden_actions.py`` (about 90 s on 2 cores); the numbers are on the Results page.
"""
import gymnasium as gym
import xagents
from xagents.envs.creation import AUTORESET_MODE, one_hot_observations


class Count(gym.Wrapper):
    """Counts the actions sent (``sent``) and those the env's mask forbade (``forbidden``)."""

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.mask = info['action_mask']
        return observation, info

    def step(self, action):
        self.sent = getattr(self, 'sent', 0) + 1
        self.forbidden = getattr(self, 'forbidden', 0) + int(not self.mask[action])
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.mask = info['action_mask']
        return observation, reward, terminated, truncated, info


def envs(n):
    return gym.vector.SyncVectorEnv([lambda: one_hot_observations(Count(gym.make('Taxi-v4')))] * n,
                                    autoreset_mode=AUTORESET_MODE)


for name, settings in (('PPO', dict(n_steps=128)), ('DQN', dict(lr=1e-3, buffer_max_size=50000, buffer_initial_size=1000,
                        buffer_batch_size=64, update_every=16, gradient_steps=8, target_update_interval=250,
                        epsilon_decay_steps=50000, epsilon_end=0.05))):
    for masks in (True, False):
        vector = envs(8 if name == 'PPO' else 1)
        agent = getattr(xagents, name)(vector, seed=0, action_masks=masks, **settings)
        agent.fit(max_steps=50_000, quiet=True)
        counters = [env.get_wrapper_attr('forbidden') for env in vector.envs]
        sent = [env.get_wrapper_attr('sent') for env in vector.envs]
        print(f'{name} masks {"on" if masks else "off"}: {sum(counters):,} forbidden of {sum(sent):,} actions sent')

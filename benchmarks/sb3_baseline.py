"""Stable-Baselines3 with RL Zoo's tuned settings: the side of `benchmarks/versus_sb3.py` that is not xagents.

Runs in its own virtual environment (SB3 is a comparison, not a dependency of xagents)::

    python -m venv sb3 && sb3/bin/pip install stable-baselines3 sb3-contrib 'gymnasium[box2d,atari,mujoco]' opencv-python-headless
    sb3/bin/python benchmarks/sb3_baseline.py ppo-cartpole --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py maskable-taxi --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py multi-input-doorkey --seed 0  # also: pip install minigrid
    sb3/bin/python benchmarks/sb3_baseline.py evaluate --algo ppo --env Hopper-v5 --steps 300000 --seed 0

Prints one JSON line: the env steps taken and, for a target, the steps at which it was reached;
for a throughput case, env steps per second after the warm-up (the random-action steps and the
first update); for evaluate, a line per evaluation (10 deterministic episodes) and then all of them.
"""
from __future__ import annotations

import argparse
import json
import time

import ale_py
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import A2C, DDPG, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize


def linear(start: float):
    """RL Zoo's lin_<start>: decays linearly to 0 over the run."""
    return lambda remaining: remaining * start


class StopAtMean(BaseCallback):
    """Stop once the mean return of the last ``window`` finished episodes reaches ``target``."""

    def __init__(self, target: float, window: int) -> None:
        super().__init__()
        self.target, self.window, self.reached = target, window, None

    def _on_step(self) -> bool:
        returns = [info['r'] for info in self.model.ep_info_buffer][-self.window:]
        if len(returns) == self.window and np.mean(returns) >= self.target:
            self.reached = self.num_timesteps
            return False
        return True


class Clock(BaseCallback):
    """Record the time and step count once ``after`` env steps have passed (the warm-up's end)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.start = after, None

    def _on_step(self) -> bool:
        if self.start is None and self.num_timesteps >= self.after:
            self.start = (time.perf_counter(), self.num_timesteps)
        return True


def ppo_cartpole(seed: int) -> dict:
    env = make_vec_env('CartPole-v1', n_envs=8, seed=seed)
    model = PPO('MlpPolicy', env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed)
    stop = StopAtMean(475, 100)
    model.learn(100_000, callback=stop)
    return {'steps': model.num_timesteps, 'reached': stop.reached}


def sac_pendulum(seed: int) -> dict:
    env = make_vec_env('Pendulum-v1', n_envs=1, seed=seed)
    model = SAC('MlpPolicy', env, learning_rate=1e-3, seed=seed)
    stop = StopAtMean(-200, 20)
    model.learn(20_000, callback=stop)
    return {'steps': model.num_timesteps, 'reached': stop.reached}


def ppo_pong(seed: int) -> dict:
    env = VecFrameStack(make_atari_env('PongNoFrameskip-v4', n_envs=8, seed=seed), n_stack=4)
    model = PPO('CnnPolicy', env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=linear(2.5e-4),
                clip_range=linear(0.1), vf_coef=0.5, ent_coef=0.01, seed=seed)
    model.learn(10_240)
    return {'steps': model.num_timesteps, 'reached': None}


def throughput(algo: str, env_id: str, seed: int, steps: int, warmup: int) -> dict:
    """RL Zoo's MuJoCo settings with a short random warm-up; steps/s after it and the first update."""
    model = zoo_model(algo, env_id, seed, learning_starts=warmup)
    clock = Clock(warmup + 10)
    model.learn(steps, callback=clock)
    started, at = clock.start
    return {'steps': model.num_timesteps, 'steps_per_second': (model.num_timesteps - at) / (time.perf_counter() - started)}


ZOO_PPO_MUJOCO = {  # RL Zoo's ppo.yml (v4 entries), all with normalize: true and one env
    'Hopper-v5': dict(batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05, ent_coef=0.00229519,
                      clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
                      policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                         net_arch=dict(pi=[256, 256], vf=[256, 256]))),
    'Walker2d-v5': dict(batch_size=32, n_steps=512, gamma=0.99, learning_rate=5.05041e-05, ent_coef=0.000585045,
                        clip_range=0.1, n_epochs=20, gae_lambda=0.95, max_grad_norm=1, vf_coef=0.871923),
    'HalfCheetah-v5': dict(batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05, ent_coef=0.000401762,
                           clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
                           policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                              net_arch=dict(pi=[256, 256], vf=[256, 256]))),
}


class Evaluations(BaseCallback):
    """Every ``frequency`` env steps, the mean return of ``episodes`` deterministic episodes on a fresh env from
    ``make`` (observations normalised with the training statistics, as RL Zoo evaluates; within the env's masks
    if it has ``action_masks``); with a ``target``, training stops once the mean reaches it."""

    def __init__(self, make, frequency: int, seed: int, episodes: int = 10, target: float | None = None) -> None:
        super().__init__()
        self.make, self.frequency, self.seed, self.episodes, self.target = make, frequency, seed, episodes, target
        self.evaluations, self.reached = [], None

    def _on_step(self) -> bool:
        if self.num_timesteps % self.frequency:
            return True
        env, returns = self.make(), []
        normalize = self.model.get_vec_normalize_env()
        for episode in range(self.episodes):
            observation, _ = env.reset(seed=10_000 + self.seed * 100 + episode)
            done, total = False, 0.0
            while not done:
                if normalize is not None:
                    observation = normalize.normalize_obs(observation)
                masks = {'action_masks': env.action_masks()} if hasattr(env, 'action_masks') else {}
                action, _ = self.model.predict(observation, deterministic=True, **masks)
                if isinstance(env.action_space, gym.spaces.Discrete):
                    action = int(action)  # (Taxi indexes its tables with it)
                observation, reward, terminated, truncated, _ = env.step(action)
                total, done = total + reward, terminated or truncated
            returns.append(total)
        self.evaluations.append((self.num_timesteps, float(np.mean(returns))))
        print(json.dumps({'step': self.num_timesteps, 'eval': self.evaluations[-1][1]}), flush=True)
        if self.target is not None and self.evaluations[-1][1] >= self.target:
            self.reached = self.num_timesteps
            return False
        return True


def zoo_model(algo: str, env_id: str, seed: int, learning_starts: int = 10_000):
    """RL Zoo's settings for ``algo`` on ``env_id`` (a MuJoCo env, LunarLander-v3 for A2C, LunarLanderContinuous-v3
    for DDPG); SAC, TD3 and DDPG act at random for their first ``learning_starts`` steps."""
    if algo == 'a2c':  # a2c.yml LunarLander: lin_0.00083 decays to 0 over the run (RL Zoo's run: 200k steps)
        env = make_vec_env(env_id, n_envs=8, seed=seed)
        return A2C('MlpPolicy', env, n_steps=5, gamma=0.995, learning_rate=linear(0.00083), ent_coef=1e-5, seed=seed)
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    if algo == 'ppo':
        env = VecNormalize(env, gamma=ZOO_PPO_MUJOCO[env_id]['gamma'])
        return PPO('MlpPolicy', env, seed=seed, **ZOO_PPO_MUJOCO[env_id])
    if algo == 'sac':
        return SAC('MlpPolicy', env, learning_starts=learning_starts, seed=seed)  # 256-256, batch 256
    noise = NormalActionNoise(np.zeros(env.action_space.shape), 0.1 * np.ones(env.action_space.shape))
    if algo == 'ddpg':  # ddpg.yml's settings; 50 gradient steps every 50 env steps, as xagents' preset
        return DDPG('MlpPolicy', env, learning_starts=learning_starts, learning_rate=1e-3, gamma=0.98, buffer_size=200_000,
                    batch_size=256, train_freq=50, gradient_steps=50, action_noise=noise,
                    policy_kwargs={'net_arch': [400, 300]}, seed=seed)
    return TD3('MlpPolicy', env, learning_starts=learning_starts, learning_rate=1e-3, batch_size=256, action_noise=noise,
               policy_kwargs={'net_arch': [400, 300]}, seed=seed)


def evaluate(algo: str, env_id: str, seed: int, steps: int, frequency: int) -> dict:
    """RL Zoo's settings for ``algo`` on ``env_id``, evaluated every ``frequency`` steps; the evaluations."""
    return learn_and_evaluate(zoo_model(algo, env_id, seed), Evaluations(lambda: gym.make(env_id), frequency, seed),
                              steps)


def learn_and_evaluate(model, evaluations: Evaluations, steps: int) -> dict:
    start = time.perf_counter()
    model.learn(steps, callback=evaluations)
    return {'steps': model.num_timesteps, 'reached': evaluations.reached,
            'train_seconds': time.perf_counter() - start, 'evaluations': evaluations.evaluations}


def maskable_taxi(seed: int) -> dict:
    """SB3-contrib's MaskablePPO on Taxi-v4 with xagents' PPO settings for it (8 envs x 128 steps, 4 epochs of 4
    minibatches, lr 3e-4, GAE 0.95, entropy 0.01): every 20,000 steps 20 deterministic episodes within the
    masks, stopping at a mean of 7; the steps, the time and each evaluation."""
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.wrappers import ActionMasker

    def make():
        return ActionMasker(gym.make('Taxi-v4'), lambda env: env.unwrapped.action_mask(env.unwrapped.s).astype(bool))

    model = MaskablePPO('MlpPolicy', make_vec_env(make, n_envs=8, seed=seed), n_steps=128, batch_size=256,
                        n_epochs=4, learning_rate=3e-4, gae_lambda=0.95, ent_coef=0.01, seed=seed)
    return learn_and_evaluate(model, Evaluations(make, 20_000, seed, episodes=20, target=7), 600_000)


def multi_input_doorkey(seed: int) -> dict:
    """SB3's PPO with MultiInputPolicy on MiniGrid-DoorKey-5x5-v0's image and direction, with xagents' settings
    (8 envs x 128 steps, 10 epochs of 16 minibatches, lr 2.5e-4, GAE 0.95, no entropy bonus, 64-64 tanh). The
    7x7 grid of ids is too small for SB3's NatureCNN: it enters as a float Box of id / 10, which SB3's
    CombinedExtractor flattens (as xagents' minigrid-model.cfg does); the direction is one-hot in both. Every
    10,240 steps 20 deterministic episodes, stopping at a mean of 0.9 or after 150,000 steps."""
    import minigrid  # noqa: F401 (registers the envs)

    class ImageAndDirection(gym.ObservationWrapper):
        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            spaces = env.observation_space.spaces
            self.observation_space = gym.spaces.Dict({
                'direction': spaces['direction'],
                'image': gym.spaces.Box(0.0, 25.5, spaces['image'].shape, np.float32)})

        def observation(self, observation: dict) -> dict:
            return {'direction': observation['direction'], 'image': observation['image'].astype(np.float32) / 10}

    def make():
        return ImageAndDirection(gym.make('MiniGrid-DoorKey-5x5-v0'))

    model = PPO('MultiInputPolicy', make_vec_env(make, n_envs=8, seed=seed), n_steps=128, batch_size=64,
                n_epochs=10, learning_rate=2.5e-4, gae_lambda=0.95, ent_coef=0.0, seed=seed)
    return learn_and_evaluate(model, Evaluations(make, 10_240, seed, episodes=20, target=0.9), 150_000)


CASES = {'ppo-cartpole': ppo_cartpole, 'sac-pendulum': sac_pendulum, 'ppo-pong': ppo_pong,
         'maskable-taxi': maskable_taxi, 'multi-input-doorkey': multi_input_doorkey,
         'sac-hopper': lambda seed, steps, warmup: throughput('sac', 'Hopper-v5', seed, steps, warmup),
         'td3-hopper': lambda seed, steps, warmup: throughput('td3', 'Hopper-v5', seed, steps, warmup)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('case', choices=[*CASES, 'evaluate'])
    parser.add_argument('--algo', choices=['ppo', 'sac', 'td3', 'a2c', 'ddpg'],
                        help='evaluate: the algorithm (a2c: LunarLander-v3 only, ddpg: LunarLanderContinuous-v3 only)')
    parser.add_argument('--env', default='Hopper-v5', help='evaluate: the env (default: Hopper-v5)')
    parser.add_argument('--eval-frequency', type=int, default=20_000, help='evaluate: steps between evaluations')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--steps', type=int, default=6000, help='throughput cases: env steps in all')
    parser.add_argument('--warmup', type=int, default=1000, help='throughput cases: random-action steps first')
    args = parser.parse_args()
    only = {'a2c': 'LunarLander-v3', 'ddpg': 'LunarLanderContinuous-v3'}.get(args.algo, args.env)
    if args.env != only:
        parser.error(f'--algo {args.algo} has RL Zoo\'s settings for {only} only, got --env {args.env}')
    gym.register_envs(ale_py)
    gym.logger.min_level = 40
    if args.case == 'evaluate':
        result = evaluate(args.algo, args.env, args.seed, args.steps, args.eval_frequency)
    else:
        result = CASES[args.case](args.seed, *((args.steps, args.warmup) if args.case.endswith('hopper') else ()))
    print(json.dumps({'case': args.case, 'seed': args.seed, 'torch_threads': torch.get_num_threads(), **result}))


if __name__ == '__main__':
    main()

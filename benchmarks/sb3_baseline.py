"""Stable-Baselines3 with RL Zoo's tuned settings: the side of `benchmarks/versus_sb3.py` that is not xagents.

Runs in its own virtual environment (SB3 is a comparison, not a dependency of xagents)::

    python -m venv sb3 && sb3/bin/pip install stable-baselines3 sb3-contrib 'gymnasium[box2d,atari,mujoco]' opencv-python-headless
    sb3/bin/python benchmarks/sb3_baseline.py ppo-cartpole --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py ppo-cartpole-constant-clip --seed 0  # the clip range kept at 0.2
    sb3/bin/python benchmarks/sb3_baseline.py maskable-taxi --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py multi-input-doorkey --seed 0  # also: pip install minigrid
    sb3/bin/python benchmarks/sb3_baseline.py recurrent-cartpole-novel --seed 0  # RecurrentPPO, CartPoleNoVel-v1
    sb3/bin/python benchmarks/sb3_baseline.py ppo-cartpole-novel --seed 0  # the same without the LSTM (a control)
    sb3/bin/python benchmarks/sb3_baseline.py recurrent-pendulum-novel --seed 0  # RecurrentPPO, PendulumNoVel-v1
    sb3/bin/python benchmarks/sb3_baseline.py evaluate --algo ppo --env Hopper-v5 --steps 300000 --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py evaluate --algo qrdqn --env CartPole-v1 --steps 50000 --eval-frequency 5000 --seed 0
    sb3/bin/python benchmarks/sb3_baseline.py defaults --algo dqn --env xagents.envs.unpreset:Own/CartPole-v1 \
        --steps 150000 --eval-frequency 10000 --seed 0  # SB3's defaults (benchmarks/defaults_vs_sb3.py runs them)

FetchReach (``her-fetchreach``: SAC + HER) needs gymnasium-robotics beside MuJoCo < 3.12: gymnasium-robotics
1.4.2's ``set_joint_qpos`` compares ``model.jnt_type`` (a NumPy int) with ``mujoco.mjtJoint`` members, which
MuJoCo 3.12 and later (4.0.0, what ``gymnasium[mujoco]`` 1.4 installs, too) no longer count equal, so
``gym.make('FetchReach-v4')`` fails with an AssertionError (3.12, 3.14, 3.16, 3.17 and 4.0 tried); 3.3.7, 3.8.1,
3.9, 3.10 and 3.11.0 work. So a venv of its own, seeing the packages of the environment xagents is installed
in (here /work/main/.venv) through a .pth::

    python3.11 -m venv --system-site-packages venv-mj3
    echo "import site; site.addsitedir('$PWD/.venv/lib/python3.11/site-packages')" > venv-mj3/lib/python3.11/site-packages/main_venv.pth
    venv-mj3/bin/pip install torch==2.13.0  # the CPU build (a bare torch brings the CUDA one)
    venv-mj3/bin/pip install 'mujoco<3.12' gymnasium-robotics stable-baselines3
    venv-mj3/bin/python benchmarks/sb3_baseline.py her-fetchreach --seed 0

Prints one JSON line: the env steps taken and, for a target, the steps at which it was reached;
for a throughput case, env steps per second after the warm-up (the random-action steps and the
first update); for evaluate and the cases that evaluate, a line per evaluation (deterministic episodes,
with the success rate where the env reports one) and then all of them, with the seconds spent training
(evaluations included) and in the evaluations.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import ClassVar

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


def ppo_cartpole(seed: int, constant_clip: bool = False) -> dict:
    """RL Zoo's CartPole PPO; ``constant_clip`` keeps its clip range at 0.2 where RL Zoo decays it to 0 (xagents'
    clip range has no schedule: ``ppo-cartpole-same`` runs both sides so)."""
    env = make_vec_env('CartPole-v1', n_envs=8, seed=seed)
    model = PPO('MlpPolicy', env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=0.2 if constant_clip else linear(0.2), seed=seed)
    stop = StopAtMean(475, 100)
    model.learn(100_000, callback=stop)
    return {'steps': model.num_timesteps, 'reached': stop.reached}


def sac_pendulum(seed: int, learning_starts: int = 100) -> dict:
    """RL Zoo's Pendulum SAC (``sac-pendulum-same``: 256 random steps first, as xagents, which samples a batch of
    256 only from a buffer that holds one, where SB3 samples 256 from its first 100 with replacement)."""
    env = make_vec_env('Pendulum-v1', n_envs=1, seed=seed)
    model = SAC('MlpPolicy', env, learning_rate=1e-3, learning_starts=learning_starts, seed=seed)
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
    """RL Zoo's settings with a short warm-up (random actions for SAC, TD3 and DDPG); steps/s after it and the
    first update."""
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
    if it has ``action_masks``; a recurrent policy's state and ``episode_start`` carried from step to step, as
    `predict` wants them); with a ``target``, training stops once the mean reaches it. Where the env reports
    ``info['is_success']``, each evaluation also holds the success rate (that key at each episode's end). With
    ``at_end``, a last evaluation when training ends (unless the latest is at that step or reached the target)."""

    def __init__(self, make, frequency: int, seed: int, episodes: int = 10, target: float | None = None,
                 at_end: bool = False) -> None:
        super().__init__()
        self.make, self.frequency, self.seed, self.episodes, self.target = make, frequency, seed, episodes, target
        self.at_end, self.evaluations, self.reached, self.seconds = at_end, [], None, 0.0

    def _on_step(self) -> bool:
        if self.num_timesteps % self.frequency:
            return True
        self.evaluate()
        if self.target is not None and self.evaluations[-1][1] >= self.target:
            self.reached = self.num_timesteps
            return False
        return True

    def _on_training_end(self) -> None:
        latest = self.evaluations[-1][0] if self.evaluations else None
        if self.at_end and self.reached is None and latest != self.num_timesteps:
            self.evaluate()

    def evaluate(self) -> None:
        start = time.perf_counter()
        env, returns, successes = self.make(), [], []
        normalize = self.model.get_vec_normalize_env()
        for episode in range(self.episodes):
            observation, _ = env.reset(seed=10_000 + self.seed * 100 + episode)
            done, total, state, starting = False, 0.0, None, True
            while not done:
                if normalize is not None:
                    observation = normalize.normalize_obs(observation)
                masks = {'action_masks': env.action_masks()} if hasattr(env, 'action_masks') else {}
                action, state = self.model.predict(observation, state=state, episode_start=np.array([starting]),
                                                   deterministic=True, **masks)
                if isinstance(env.action_space, gym.spaces.Discrete):
                    action = int(action)  # (Taxi indexes its tables with it)
                observation, reward, terminated, truncated, info = env.step(action)
                total, done, starting = total + reward, terminated or truncated, False
            returns.append(total)
            if 'is_success' in info:
                successes.append(float(info['is_success']))
        env.close()
        self.evaluations.append((self.num_timesteps, float(np.mean(returns)),
                                 *([float(np.mean(successes))] if successes else [])))
        self.seconds += time.perf_counter() - start
        print(json.dumps({'step': self.num_timesteps, 'eval': self.evaluations[-1][1],
                          **({'success': self.evaluations[-1][2]} if successes else {})}), flush=True)


ZOO_QRDQN = {  # qrdqn.yml (LunarLander-v2's settings on v3); exploration_fraction is of the steps learn is given
    'CartPole-v1': dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10)),
    'LunarLander-v3': dict(learning_rate=linear(1.5e-3), batch_size=128, buffer_size=100_000, learning_starts=10_000,
                           gamma=0.995, target_update_interval=1, train_freq=256, gradient_steps=-1,
                           exploration_fraction=0.24, exploration_final_eps=0.18,
                           policy_kwargs=dict(net_arch=[256, 256], n_quantiles=170)),
}


ZOO_CROSSQ = {  # RL Zoo's crossq.yml (its MuJoCo entries are for v4)
    'Pendulum-v1': dict(policy_delay=2, policy_kwargs=dict(net_arch=[256, 256])),
    'Hopper-v5': dict(learning_rate=1e-3, buffer_size=1_000_000, policy_delay=3,
                      policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[2048, 2048]))),
}


def zoo_model(algo: str, env_id: str, seed: int, learning_starts: int | None = None):
    """RL Zoo's settings for ``algo`` on ``env_id`` (a MuJoCo env, LunarLander-v3 for A2C, LunarLanderContinuous-v3
    for DDPG, CartPole-v1 or LunarLander-v3 for QR-DQN); learning starts after ``learning_starts`` steps if given
    (SAC, TD3 and DDPG act at random until then; default 10,000, QR-DQN's RL Zoo's)."""
    if algo == 'qrdqn':
        from sb3_contrib import QRDQN

        settings = {**ZOO_QRDQN[env_id], **({} if learning_starts is None else {'learning_starts': learning_starts})}
        return QRDQN('MlpPolicy', make_vec_env(env_id, n_envs=1, seed=seed), seed=seed, **settings)
    if algo == 'crossq':  # one gradient step per env step, learning from step 100 unless given: sb3-contrib's defaults
        from sb3_contrib import CrossQ

        starts = {} if learning_starts is None else {'learning_starts': learning_starts}
        return CrossQ('MlpPolicy', make_vec_env(env_id, n_envs=1, seed=seed), seed=seed, **starts, **ZOO_CROSSQ[env_id])
    learning_starts = 10_000 if learning_starts is None else learning_starts
    if algo == 'tqc':  # SB3-contrib's defaults (256-256, 2 critics of 25 quantiles, 2 dropped each), as RL Zoo's MuJoCo
        from sb3_contrib import TQC

        return TQC('MlpPolicy', make_vec_env(env_id, n_envs=1, seed=seed), learning_starts=learning_starts, seed=seed)
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
            'train_seconds': time.perf_counter() - start, 'eval_seconds': evaluations.seconds,
            'evaluations': evaluations.evaluations}


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
    (RL Zoo's: 8 envs x 128 steps, 10 epochs of 16 minibatches, lr 2.5e-4, GAE 0.95, no entropy bonus, 64-64
    tanh, observations normalised). The 7x7 grid of ids is too small for SB3's NatureCNN: it enters as a float Box
    of the same values, which SB3's CombinedExtractor flattens, normalised by VecNormalize (the image key only, as
    xagents normalises the grid; rewards as they are); the direction is one-hot in both. Every 10,240 steps 20
    deterministic episodes, stopping at a mean of 0.9 or after 150,000 steps."""
    import minigrid  # noqa: F401 (registers the envs)

    def make():
        return FloatGrid(gym.wrappers.FilterObservation(gym.make('MiniGrid-DoorKey-5x5-v0'), ['direction', 'image']))

    env = VecNormalize(make_vec_env(make, n_envs=8, seed=seed), norm_reward=False, norm_obs_keys=['image'])
    model = PPO('MultiInputPolicy', env, n_steps=128, batch_size=64,
                n_epochs=10, learning_rate=2.5e-4, gae_lambda=0.95, ent_coef=0.0, seed=seed)
    return learn_and_evaluate(model, Evaluations(make, 10_240, seed, episodes=20, target=0.9), 150_000)


class MaskVelocity(gym.ObservationWrapper):
    """RL Zoo's ``MaskVelocityWrapper``: the velocity entries of the observation read 0, so that only a memory of
    past observations can tell them (its ``CartPoleNoVel-v1`` and ``PendulumNoVel-v1``)."""

    VELOCITIES: ClassVar[dict[str, list[int]]] = {'CartPole-v1': [1, 3], 'Pendulum-v1': [2]}

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.velocities = self.VELOCITIES[env.unwrapped.spec.id]

    def observation(self, observation: np.ndarray) -> np.ndarray:
        observation = observation.copy()
        observation[self.velocities] = 0
        return observation


ZOO_LSTM_POLICY = {'ortho_init': False, 'activation_fn': torch.nn.ReLU, 'lstm_hidden_size': 64,  # ppo_lstm.yml's
                   'enable_critic_lstm': True, 'net_arch': {'pi': [64], 'vf': [64]}}  # for both NoVel envs


def cartpole_novel(seed: int, recurrent: bool) -> dict:
    """RL Zoo's ppo_lstm.yml CartPoleNoVel-v1 (VecNormalize with gamma 0.98; 8 envs x 32 steps, batch 256, GAE 0.8,
    20 epochs, no entropy bonus, lr and clip linear from 1e-3 and 0.2 to 0; LSTM 64 for the actor and another for
    the critic, then 64 ReLU units each) for 100,000 steps; with ``recurrent`` False, SB3's PPO with the same
    settings and no LSTM (a control: without memory, the velocities cannot be known). Every 10,240 steps 20
    deterministic episodes on a fresh env, stopping at a mean of 475."""
    def make():
        return MaskVelocity(gym.make('CartPole-v1'))

    env = VecNormalize(make_vec_env(make, n_envs=8, seed=seed), gamma=0.98)
    settings = {'n_steps': 32, 'batch_size': 256, 'gae_lambda': 0.8, 'gamma': 0.98, 'n_epochs': 20, 'ent_coef': 0.0,
                'learning_rate': linear(1e-3), 'clip_range': linear(0.2), 'seed': seed}
    if recurrent:
        from sb3_contrib import RecurrentPPO
        model = RecurrentPPO('MlpLstmPolicy', env, policy_kwargs=ZOO_LSTM_POLICY, **settings)
    else:
        policy = {key: value for key, value in ZOO_LSTM_POLICY.items() if 'lstm' not in key}
        model = PPO('MlpPolicy', env, policy_kwargs=policy, **settings)
    return learn_and_evaluate(model, Evaluations(make, 10_240, seed, episodes=20, target=475, at_end=True), 100_000)


def recurrent_pendulum_novel(seed: int) -> dict:
    """RL Zoo's ppo_lstm.yml PendulumNoVel-v1 (VecNormalize with gamma 0.9; 4 envs x 1024 steps, minibatches of
    128 (RecurrentPPO's default: the yml sets none), GAE 0.95, gamma 0.9, 10 epochs, lr 1e-3, clip 0.2, gSDE
    resampled every 4 steps, the LSTM policy above) for 100,000 steps (so 102,400: whole rollouts). Every
    10,240 steps 10 deterministic episodes on a fresh env, stopping at a mean of -250 (RL Zoo's one run
    reports -218 +- 140 after 100k)."""
    from sb3_contrib import RecurrentPPO

    def make():
        return MaskVelocity(gym.make('Pendulum-v1'))

    env = VecNormalize(make_vec_env(make, n_envs=4, seed=seed), gamma=0.9)
    model = RecurrentPPO('MlpLstmPolicy', env, n_steps=1024, batch_size=128, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                         ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4,
                         policy_kwargs=ZOO_LSTM_POLICY, seed=seed)
    return learn_and_evaluate(model, Evaluations(make, 10_240, seed, episodes=10, target=-250, at_end=True), 100_000)


def her_fetchreach(seed: int) -> dict:
    """SAC with HER on gymnasium-robotics' FetchReach-v4, RL Zoo's sac.yml FetchReach settings (MultiInputPolicy
    64-64, VecNormalize with gamma 0.95, buffer 1e6, batch 256, gamma 0.95, lr 1e-3, automatic entropy, 1,000
    random steps first, HerReplayBuffer with 4 'future' goals per real one; tau and the rest SB3's defaults) for
    20,000 steps. Every 2,000 steps 20 deterministic episodes: the mean return and the success rate; the first
    step with a success rate of 0.9 or more. Needs MuJoCo < 3.12 (see the module's docstring)."""
    import gymnasium_robotics
    from stable_baselines3 import HerReplayBuffer

    gym.register_envs(gymnasium_robotics)

    def make():
        return gym.make('FetchReach-v4')

    env = VecNormalize(make_vec_env(make, n_envs=1, seed=seed), gamma=0.95)
    model = SAC('MultiInputPolicy', env, buffer_size=1_000_000, ent_coef='auto', batch_size=256, gamma=0.95,
                learning_rate=1e-3, learning_starts=1000, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs={'goal_selection_strategy': 'future', 'n_sampled_goal': 4},
                policy_kwargs={'net_arch': [64, 64]}, seed=seed)
    result = learn_and_evaluate(model, Evaluations(make, 2_000, seed, episodes=20), 20_000)
    result['success_reached'] = next((step for step, _, success in result['evaluations'] if success >= 0.9), None)
    return result


SB3_DEFAULTS = {'ppo': 'stable_baselines3:PPO', 'a2c': 'stable_baselines3:A2C', 'dqn': 'stable_baselines3:DQN',
                'sac': 'stable_baselines3:SAC', 'td3': 'stable_baselines3:TD3', 'ddpg': 'stable_baselines3:DDPG',
                'trpo': 'sb3_contrib:TRPO', 'qrdqn': 'sb3_contrib:QRDQN', 'tqc': 'sb3_contrib:TQC',
                'crossq': 'sb3_contrib:CrossQ'}  # ACER has none


class FloatGrid(gym.ObservationWrapper):
    """A Dict's uint8 grid key (MiniGrid's 7x7 ids) as a float Box of the same values: SB3's NatureCNN cannot take a
    7x7 image, and a float Box is flattened by its CombinedExtractor."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        spaces = dict(env.observation_space.spaces)
        self.grids = [key for key, space in spaces.items() if space.dtype == np.uint8 and len(space.shape) == 3]
        for key in self.grids:
            spaces[key] = gym.spaces.Box(0.0, 255.0, spaces[key].shape, np.float32)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: dict) -> dict:
        return {**observation, **{key: observation[key].astype(np.float32) for key in self.grids}}


def sb3_defaults(algo: str, env_id: str, seed: int, steps: int, frequency: int, her: bool = False) -> dict:
    """SB3's (sb3-contrib's TRPO, QRDQN, TQC and CrossQ; MaskablePPO where the env masks actions) defaults for
    ``algo`` on ``env_id``, as ``ALGO('MlpPolicy' or 'MultiInputPolicy', env_id)`` makes them: one env, nothing
    tuned; SAC, TD3 and DDPG with ``HerReplayBuffer``'s defaults when ``her``. Every ``frequency`` steps 10
    deterministic episodes."""
    import importlib
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import xagents.envs.unpreset  # noqa: F401 (registers the Own/ ids; imports neither Keras nor TensorFlow)

    name = env_id.rpartition(':')[2]
    masked = algo == 'ppo' and gym.spec(name).entry_point == gym.spec('Taxi-v4').entry_point

    def make():
        env = gym.make(name)
        if isinstance(env.observation_space, gym.spaces.Dict):
            env = FloatGrid(env)
        if masked:
            from sb3_contrib.common.wrappers import ActionMasker
            env = ActionMasker(env, lambda env: env.unwrapped.action_mask(env.unwrapped.s).astype(bool))
        return env

    module, _, klass = SB3_DEFAULTS[algo].partition(':')
    agent = getattr(importlib.import_module('sb3_contrib' if masked else module), 'MaskablePPO' if masked else klass)
    env = make_vec_env(make, n_envs=1, seed=seed)
    extra = {}
    if her:
        from stable_baselines3 import HerReplayBuffer
        extra = {'replay_buffer_class': HerReplayBuffer}
    policy = 'MultiInputPolicy' if isinstance(env.observation_space, gym.spaces.Dict) else 'MlpPolicy'
    model = agent(policy, env, seed=seed, **extra)
    return {'algo': algo, 'env': env_id, 'class': type(model).__name__, 'budget': steps,
            **learn_and_evaluate(model, Evaluations(make, frequency, seed, episodes=10, at_end=True), steps)}


CASES = {'ppo-cartpole': ppo_cartpole, 'sac-pendulum': sac_pendulum, 'ppo-pong': ppo_pong,
         'ppo-cartpole-constant-clip': lambda seed: ppo_cartpole(seed, constant_clip=True),
         'sac-pendulum-same': lambda seed: sac_pendulum(seed, learning_starts=256),
         'maskable-taxi': maskable_taxi, 'multi-input-doorkey': multi_input_doorkey,
         'recurrent-cartpole-novel': lambda seed: cartpole_novel(seed, recurrent=True),
         'ppo-cartpole-novel': lambda seed: cartpole_novel(seed, recurrent=False),
         'recurrent-pendulum-novel': recurrent_pendulum_novel, 'her-fetchreach': her_fetchreach,
         'sac-hopper': lambda seed, steps, warmup: throughput('sac', 'Hopper-v5', seed, steps, warmup),
         'td3-hopper': lambda seed, steps, warmup: throughput('td3', 'Hopper-v5', seed, steps, warmup),
         'qrdqn-lunar': lambda seed, steps, warmup: throughput('qrdqn', 'LunarLander-v3', seed, steps, warmup),
         'tqc-hopper': lambda seed, steps, warmup: throughput('tqc', 'Hopper-v5', seed, steps, warmup),
         'crossq-pendulum': lambda seed, steps, warmup: throughput('crossq', 'Pendulum-v1', seed, steps, warmup),
         'crossq-hopper': lambda seed, steps, warmup: throughput('crossq', 'Hopper-v5', seed, steps, warmup)}
THROUGHPUT_CASES = ('sac-hopper', 'td3-hopper', 'qrdqn-lunar', 'tqc-hopper', 'crossq-pendulum', 'crossq-hopper')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('case', choices=[*CASES, 'evaluate', 'defaults'])
    parser.add_argument('--algo', choices=['ppo', 'sac', 'td3', 'a2c', 'ddpg', 'dqn', 'trpo', 'qrdqn', 'tqc', 'crossq'],
                        help='evaluate: the algorithm (a2c: LunarLander-v3 only, ddpg: LunarLanderContinuous-v3 only, '
                             'qrdqn: CartPole-v1 or LunarLander-v3, tqc: a MuJoCo env); '
                             'defaults: any but ACER, which SB3 lacks')
    parser.add_argument('--her', action='store_true', help='defaults: with HerReplayBuffer (a goal env)')
    parser.add_argument('--env', default='Hopper-v5', help='evaluate: the env (default: Hopper-v5)')
    parser.add_argument('--eval-frequency', type=int, default=20_000, help='evaluate: steps between evaluations')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--steps', type=int, default=6000, help='throughput cases: env steps in all')
    parser.add_argument('--warmup', type=int, default=1000, help='throughput cases: random-action steps first')
    args = parser.parse_args()
    only = {'a2c': 'LunarLander-v3', 'ddpg': 'LunarLanderContinuous-v3'}.get(args.algo, args.env)
    if args.case == 'defaults':
        gym.logger.min_level = 40
        result = sb3_defaults(args.algo, args.env, args.seed, args.steps, args.eval_frequency, args.her)
        print(json.dumps({'case': args.case, 'seed': args.seed, 'torch_threads': torch.get_num_threads(), **result}))
        return
    if args.algo == 'qrdqn' and args.env not in ZOO_QRDQN:
        parser.error(f'--algo qrdqn has RL Zoo\'s settings for {" and ".join(ZOO_QRDQN)} only, got --env {args.env}')
    if args.env != only:
        parser.error(f'--algo {args.algo} has RL Zoo\'s settings for {only} only, got --env {args.env}')
    gym.register_envs(ale_py)
    gym.logger.min_level = 40
    if args.case == 'evaluate':
        result = evaluate(args.algo, args.env, args.seed, args.steps, args.eval_frequency)
    else:
        result = CASES[args.case](args.seed, *((args.steps, args.warmup) if args.case in THROUGHPUT_CASES else ()))
    print(json.dumps({'case': args.case, 'seed': args.seed, 'torch_threads': torch.get_num_threads(), **result}))


if __name__ == '__main__':
    main()

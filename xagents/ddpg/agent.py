"""Deep deterministic policy gradient (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971)."""
from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.agent.off_policy import OffPolicy
from xagents.ddpg.noise import AdaptiveParamNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise, parse_noise_type
from xagents.training.distributed import apex_exponent
from xagents.networks.models import Output

PARAM_NOISE_ADAPTION_INTERVAL = 50  # env steps between adaptive parameter noise adaptations (Baselines)


class DDPG(OffPolicy):
    """DDPG: a deterministic tanh actor, a Q critic, Polyak targets and exploration noise.

    y = R + discount * min_i Q_targ_i(s', a'),  a' = mu_targ(s') (+ clipped noise: TD3's smoothing)
    critic loss = sum_i E[w (Q_i(s, a) - y)^2] + critic_l2 * sum ||kernel||^2
    actor loss = -E[Q_1(s, mu(s))], every policy_delay-th gradient step
    DDPG has one critic, no target smoothing and ``policy_delay = 1``; :class:`TD3` switches
    those on, so this one ``train_step`` is both algorithms' maths. Actions live in ``[-1, 1]``
    (tanh) and are scaled to the env's bounds; exploration noise follows ``noise_type``
    (see :mod:`xagents.ddpg.noise`), as in OpenAI Baselines.
    """

    supported_action_spaces = (gym.spaces.Box,)
    dense_variant = '-400-300'  # SB3's networks by default; the presets of small tasks name the 64-64 ones
    model_roles = ('actor', 'critic', 'target_actor', 'target_critic')
    metric_names = ('critic_loss', 'actor_loss', 'q')
    n_critics = 1
    policy_delay = 1
    policy_noise_coef = 0.0
    noise_clip = 0.0

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        lr: float = 1e-3,
        buffer_initial_size: int = 1000,
        buffer_batch_size: int = 256,
        update_every: int = 50,
        gradient_steps: int = 50,
        tau: float = 0.005,
        noise_type: str = 'normal_0.1',
        critic_l2: float = 0.0,
        **kwargs,
    ) -> None:
        """
        Args:
            actor_model: Policy: a .cfg file, or from Python a Keras model (default: packaged cfg, 400-300 as
                SB3's; ``ann-actor.cfg`` is 64-64).
            critic_model: Q-function(s) on observation and action concatenated (default: packaged cfg, 400-300 as
                SB3's; ``ann-critic.cfg`` is 64-64).
            lr: Learning rate of the actor and the critic.
            buffer_initial_size: Transitions gathered with uniform random actions before learning starts.
            buffer_batch_size: Transitions per gradient step.
            update_every: Env steps (summed over envs, a multiple of n_envs) between updates.
            gradient_steps: Gradient steps per update, all run in one compiled call.
            tau: Polyak coefficient of the target networks.
            noise_type: Exploration noise: normal_SIGMA, ou_SIGMA, adaptive-param_SIGMA or none,
                comma-separated (Baselines' syntax), SIGMA relative to half the action range.
            critic_l2: L2 regularisation coefficient of the critic's kernels (Baselines: 0.01).
        """
        noises = parse_noise_type(noise_type)
        super().__init__(envs, lr=lr, buffer_initial_size=buffer_initial_size,
                         buffer_batch_size=buffer_batch_size, update_every=update_every,
                         gradient_steps=gradient_steps, tau=tau, **kwargs)
        self.noise_type, self.critic_l2 = noise_type, critic_l2
        dim = int(np.prod(self.action_low.shape))
        self.actor = self.build('actor', actor_model, [Output('action', dim, 'tanh')])
        heads = [Output(f'q{i + 1}', 1) for i in range(self.n_critics)]
        self.critic = self.build_critic('critic', critic_model, heads)
        self.q1 = keras.Model(self.critic.inputs, keras.tree.flatten(self.critic.outputs)[0])
        self.target_actor = self.build_target('target_actor', self.actor)
        self.target_critic = self.build_target('target_critic', self.critic)
        self.actor_optimizer = self.make_optimizer('actor')
        self.critic_optimizer = self.make_optimizer('critic')
        self.actor_forward = self.acting(self.actor)
        kinds = {'normal': NormalActionNoise, 'ou': OrnsteinUhlenbeckActionNoise}
        self.action_noises = [kinds[kind](sigma, self.rng) for kind, sigma in noises if kind in kinds]
        self.param_noise = None
        self.perturbed_forward = None
        if 'adaptive-param' in dict(noises):
            if self.actor_forward.numpy is None:  # the perturbed copy acts in float32 NumPy
                raise ValueError("adaptive-param noise perturbs a float32 NumPy copy of the actor: leave "
                                 "precision='bf16' out with it" if self.precision == 'bf16' else
                                 'adaptive-param noise perturbs a NumPy copy of the actor, which takes a .cfg actor of '
                                 'dense layers (not images or a network of yours)')
            if self.workers:
                raise ValueError('adaptive-param noise adapts to the replay buffer, which workers do not have: '
                                 'use normal or ou noise with workers')
            self.param_noise = AdaptiveParamNoise(dict(noises)['adaptive-param'], self.rng)
            self.last_adaption = 0

    def become_worker(self, index: int, count: int, first_step: int = 0) -> None:
        super().become_worker(index, count, first_step)
        for noise in self.action_noises:  # Ape-X: each actor its own noise scale
            noise.sigma *= 0.4 ** apex_exponent(index, count)

    # ------------------------------------------------------------------------ acting
    def policy(self, observations: np.ndarray, deterministic: bool = True) -> np.ndarray:
        return self.actor_forward(observations)[0]

    def greedy_graph(self, observations):
        return self.actor(observations)

    def explore(self, observations: np.ndarray) -> np.ndarray:
        if self.param_noise is None:
            actions = self.policy(observations)
        else:
            if self.perturbed_forward is None or self.episode_starts.any():
                self.perturbed_forward = self.param_noise.perturb(self.actor_forward.numpy[0])
            actions = self.perturbed_forward(observations)[0]
        for noise in self.action_noises:
            actions = noise(actions, self.episode_starts)
        return np.clip(actions, -1.0, 1.0).astype(np.float32)

    def update(self) -> dict:
        metrics = super().update()
        if self.param_noise is not None and self.steps - self.last_adaption >= PARAM_NOISE_ADAPTION_INTERVAL:
            self.last_adaption = self.steps
            observations = self.normalized(self.buffer.sample(self.buffer_batch_size).observations)
            self.param_noise.adapt(self.actor_forward.numpy[0], observations)
        return metrics

    # ---------------------------------------------------------------------- learning
    def action_values(self, observations, actions):
        return self.q_values(self.critic, observations, actions)

    def next_values(self, next_observations):
        """``min_i Q_targ_i(s', a')`` with ``a' = mu_targ(s')``, smoothed by TD3."""
        next_actions = self.target_actor(next_observations)
        if self.policy_noise_coef > 0:  # TD3's target policy smoothing
            noise = self.policy_noise_coef * keras.random.normal(ops.shape(next_actions), seed=self.graph_random)
            next_actions = ops.clip(next_actions + ops.clip(noise, -self.noise_clip, self.noise_clip), -1.0, 1.0)
        return ops.min(self.q_values(self.target_critic, next_observations, next_actions), 0)

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights):
        targets = ops.stop_gradient(rewards + discounts * self.next_values(next_observations))
        critic_variables = self.critic.trainable_variables

        def critic_objective():
            td_errors = self.action_values(observations, actions) - targets
            loss = ops.sum(ops.mean(weights * td_errors ** 2, -1))
            if self.critic_l2 > 0:
                loss += self.critic_l2 * sum(ops.sum(ops.square(v)) for v in critic_variables if len(v.shape) > 1)
            return loss, td_errors

        (critic_loss, td_errors), gradients = backend.value_and_grad(critic_objective, critic_variables)
        self.critic_optimizer.apply(gradients, critic_variables)
        if self.policy_delay == 1:
            actor_loss = self.actor_step(observations)
        else:  # TD3: every policy_delay-th gradient step
            actor_loss = backend.cond(ops.equal((self.gradient_updates + 1) % self.policy_delay, 0),
                                      lambda: self.actor_step(observations), lambda: ops.zeros(()))
        metrics = {'critic_loss': critic_loss, 'actor_loss': actor_loss, 'q': ops.mean(targets)}
        return metrics, td_errors[0]

    def actor_step(self, observations):
        """One step of the actor on ``-E[Q_1(s, mu(s))]``; returns that loss."""
        actor_variables = self.actor.trainable_variables

        def actor_objective():
            return -ops.mean(self.q1(self.critic_inputs(observations, self.actor(observations)))), ()

        (loss, _), gradients = backend.value_and_grad(actor_objective, actor_variables)
        self.actor_optimizer.apply(gradients, actor_variables)
        return loss

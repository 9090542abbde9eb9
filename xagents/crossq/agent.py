"""CrossQ (Bhatt, Palenicek et al. 2024, https://openreview.net/pdf?id=PczQtTsTIX): SAC with batch renormalisation in
its networks and no target networks."""
from __future__ import annotations

import gymnasium as gym
import keras
from keras import ops

from xagents import backend
from xagents.networks.models import Output
from xagents.sac.agent import SAC


class CrossQ(SAC):
    """CrossQ: SAC's policy, twin critics and entropy tuning (Box actions, gSDE too), with batch renormalisation
    before every dense layer of the actor and the critics, and no target networks.

    The critics see ``(s, a)`` and ``(s', a')``, ``a' ~ pi(.|s')`` (the actor outside training mode), in one joint
    batch, so that batch normalisation computes its statistics over both distributions:
        [Q_i(s, a); Q_i(s', a')] = Q_i([s; s'], [a; a'])  (training mode, one forward pass)
        y = R + discount * (min_i Q_i(s', a') - alpha log pi(a'|s'))  (no gradient through y)
        critic loss = 1/2 sum_i E[w (Q_i(s, a) - y)^2]
    Every ``policy_delay`` gradient steps, the actor (in training mode) and alpha take SAC's steps, against the
    critics outside training mode:
        actor loss = E[alpha log pi(a~|s) - min_i Q_i(s, a~)],  alpha loss = SAC's
    ``R`` and ``discount`` come from the buffer (n-step return, 0 after a termination), ``w`` are the
    prioritised-replay weights. Acting, evaluation and export use the running statistics.
    """

    masks_actions = False
    dense_variant = ''  # its own packaged ann-actor.cfg and ann-critic.cfg, SB3-contrib's sizes
    supported_action_spaces = (gym.spaces.Box,)
    model_roles = ('actor', 'critic', 'alpha')

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        lr: float = 1e-3,
        buffer_initial_size: int = 256,
        update_every: int = 50,
        gradient_steps: int = 50,
        beta1: float = 0.5,
        policy_delay: int = 3,
        batch_norm_momentum: float = 0.01,
        renorm_warmup_steps: int = 100000,
        **kwargs,
    ) -> None:
        """
        Args:
            actor_model: Policy: a .cfg file, or from Python a Keras model (default: packaged cfg, 256-256 with
                batch renormalisation).
            critic_model: The twin Q-functions, one model with two heads (default: packaged cfg, 1024-1024 with batch
                renormalisation, whose one head and its tower are built once per critic).
            lr: Learning rate of the actor, the critics and alpha.
            buffer_initial_size: Transitions gathered with uniform random actions before learning starts (one
                batch; sb3-contrib starts at 100, sampling its first batches from fewer transitions than a batch).
            update_every: Env steps (summed over envs, a multiple of n_envs) between updates.
            gradient_steps: Gradient steps per update, all run in one compiled call (50 every 50 env steps: one per
                env step, as SAC's here and sb3-contrib's one at a time).
            beta1: Adam's beta_1 (the paper's 0.5).
            policy_delay: Gradient steps per actor and alpha step.
            batch_norm_momentum: How far the running statistics move towards each training batch's.
            renorm_warmup_steps: Training calls of each normalisation layer that use the batch's statistics alone
                (plain batch normalisation) before the running ones correct them.
        """
        if 'tau' in kwargs:
            raise ValueError('CrossQ has no target networks, so tau does not apply: leave it out')
        self.policy_delay = policy_delay
        self.batch_renorm = {'momentum': batch_norm_momentum, 'warmup_steps': renorm_warmup_steps}
        super().__init__(envs, actor_model, critic_model, lr=lr, buffer_initial_size=buffer_initial_size,
                         update_every=update_every, gradient_steps=gradient_steps, beta1=beta1, **kwargs)

    def build_critics(self, critic_model, q_units: int) -> keras.Model:
        return self.build_critic('critic', critic_model, [Output('q1', q_units), Output('q2', q_units)],
                                 repeat_head=True)

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                   action_masks=None, next_action_masks=None):
        alpha = ops.exp(self.log_alpha)
        sde_noise = self.draw_sde_noise()  # the same matrix for the next actions and the actor's
        next_actions, next_log_probs = self.squashed_gaussian(next_observations, sde_noise)
        next_actions, next_log_probs = ops.stop_gradient(next_actions), ops.stop_gradient(next_log_probs)
        batch = ops.shape(observations)[0]

        def critic_objective():
            joint = self.q_values(self.critic, ops.concatenate([observations, next_observations]),
                                  ops.concatenate([ops.cast(actions, 'float32'), next_actions]), training=True)
            current, following = joint[:, :batch], joint[:, batch:]
            targets = ops.stop_gradient(
                rewards + discounts * (ops.min(following, 0) - alpha * next_log_probs))
            td_errors = current - targets
            return 0.5 * ops.sum(ops.mean(weights * td_errors ** 2, -1)), td_errors

        critic_variables = self.critic.trainable_variables
        (critic_loss, td_errors), gradients = backend.value_and_grad(critic_objective, critic_variables)
        self.critic_optimizer.apply(gradients, critic_variables)
        idle = {'actor_loss': ops.zeros(()), 'alpha_loss': ops.zeros(()), 'alpha': alpha, 'entropy': ops.zeros(())}
        actor_metrics = backend.cond(ops.equal((self.gradient_updates + 1) % self.policy_delay, 0),
                                     lambda: self.actor_step(observations, sde_noise, alpha, training=True),
                                     lambda: idle)
        return {'critic_loss': critic_loss, **actor_metrics}, td_errors[0]

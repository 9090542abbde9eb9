"""Truncated quantile critics (Kuznetsov et al. 2020, https://arxiv.org/abs/2005.04269): SAC whose critics learn
return distributions as quantiles, and whose target drops the largest of them to curb overestimation."""
from __future__ import annotations

import gymnasium as gym
import keras
from keras import ops

from xagents import backend
from xagents.maths.losses import quantile_huber_loss
from xagents.networks.models import Output
from xagents.sac.agent import SAC
from xagents.utils.memory import check_quantile_pairs


class TQC(SAC):
    """TQC: ``n_critics`` critics, each giving ``n_quantiles`` quantiles ``theta_n^m(s, a)`` of the return at the
    midpoint fractions; the policy and the entropy weight are SAC's (Box actions, gSDE too).

    Target: pool the target critics' ``N M`` quantiles at ``(s', a')``, ``a' ~ pi(.|s')``, sort them and keep the
    ``k N`` smallest (``k = M - top_quantiles_to_drop_per_net``):
        y_i = R + discount * (z_(i)(s', a') - alpha log pi(a'|s')),  i = 1..kN
        critic loss = sum_n E[w sum_m mean_i rho_tau_m(y_i - theta_n^m(s, a))]  (quantile Huber, kappa = 1)
        actor loss = E[alpha log pi(a~|s) - mean_{n,m} theta_n^m(s, a~)]
        alpha loss = SAC's
    ``R`` and ``discount`` come from the buffer (n-step return, 0 after a termination), ``w`` are the
    prioritised-replay weights, whose priorities are the differences of the means, ``mean theta(s, a) - mean y``.
    """

    masks_actions = False
    supported_action_spaces = (gym.spaces.Box,)

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        n_critics: int = 2,
        n_quantiles: int = 25,
        top_quantiles_to_drop_per_net: int = 2,
        **kwargs,
    ) -> None:
        """
        Args:
            actor_model: Policy: a .cfg file, or from Python a Keras model (default: SAC's packaged 256-256 cfg).
            critic_model: The critics, one model with ``n_critics`` heads of ``n_quantiles`` (default: packaged cfg,
                whose one head and its 256-256 tower are built once per critic, SB3-contrib's sizes;
                ``ann-critic.cfg`` is 64-64).
            n_critics: Critic networks (the paper's N).
            n_quantiles: Quantiles each critic estimates (the paper's M).
            top_quantiles_to_drop_per_net: Largest target quantiles dropped per critic (the paper's d; kN = N(M - d)
                are kept).
        """
        if top_quantiles_to_drop_per_net >= n_quantiles:  # (each alone is checked as every parameter is)
            raise ValueError(f'expected 0 <= top_quantiles_to_drop_per_net < n_quantiles = {n_quantiles}, '
                             f'got {top_quantiles_to_drop_per_net}')
        self.n_critics, self.n_quantiles = n_critics, n_quantiles
        self.kept_quantiles = n_critics * (n_quantiles - top_quantiles_to_drop_per_net)
        super().__init__(envs, actor_model, critic_model, **kwargs)

    def build_critics(self, critic_model, q_units: int) -> keras.Model:
        check_quantile_pairs(f'--n-critics {self.n_critics:,} with --n-quantiles {self.n_quantiles:,}',
                             self.buffer_batch_size, self.n_critics * self.n_quantiles, self.kept_quantiles,
                             'lower --n-critics or --n-quantiles (or --buffer-batch-size)')
        outputs = [Output(f'z{n + 1}', self.n_quantiles) for n in range(self.n_critics)]
        return self.build_critic('critic', critic_model, outputs, repeat_head=True)

    def quantiles(self, model: keras.Model, observations, actions):
        """``(n_critics, batch, n_quantiles)`` every critic's quantiles at ``(s, a)``."""
        return ops.stack(keras.tree.flatten(model(self.critic_inputs(observations, actions))))

    def next_quantiles(self, next_observations, sde_noise=None):
        """``(batch, kN)`` the kept target quantiles of ``(s', a')``, ``a' ~ pi(.|s')``, less ``alpha log pi(a'|s')``,
        ascending."""
        next_actions, next_log_probs = self.squashed_gaussian(next_observations, sde_noise)
        pooled = ops.transpose(self.quantiles(self.target_critic, next_observations, next_actions), (1, 0, 2))
        pooled = ops.reshape(pooled, (-1, self.n_critics * self.n_quantiles))
        kept = ops.sort(pooled, axis=-1)[:, :self.kept_quantiles]
        return kept - ops.exp(self.log_alpha) * next_log_probs[:, None]

    def action_values(self, observations, actions):
        return ops.mean(self.quantiles(self.critic, observations, actions), -1)

    def next_values(self, next_observations, sde_noise=None, next_action_masks=None):
        if sde_noise is None:
            sde_noise = self.draw_sde_noise()
        return ops.mean(self.next_quantiles(next_observations, sde_noise), -1)

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                   action_masks=None, next_action_masks=None):
        alpha = ops.exp(self.log_alpha)
        sde_noise = self.draw_sde_noise()  # the same matrix for the target's and the actor's actions
        targets = ops.stop_gradient(rewards[:, None] + discounts[:, None] * self.next_quantiles(next_observations,
                                                                                                 sde_noise))

        def critic_objective():
            current = self.quantiles(self.critic, observations, actions)
            losses = ops.stack([quantile_huber_loss(current[n], targets) for n in range(self.n_critics)])
            return ops.sum(ops.mean(weights * losses, -1)), current

        critic_variables = self.critic.trainable_variables
        (critic_loss, current), gradients = backend.value_and_grad(critic_objective, critic_variables)
        self.critic_optimizer.apply(gradients, critic_variables)
        metrics = {'critic_loss': critic_loss, **self.actor_step(observations, sde_noise, alpha)}
        return metrics, ops.mean(current, (0, 2)) - ops.mean(targets, -1)

    def policy_q(self, observations, actions):
        """The mean of every critic's quantiles (no truncation for the actor)."""
        return ops.mean(self.quantiles(self.critic, observations, actions), (0, 2))

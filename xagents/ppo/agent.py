"""Proximal policy optimisation (Schulman et al. 2017, arXiv 1707.06347), clipped objective."""
from __future__ import annotations

import gymnasium as gym
import tensorflow as tf

from xagents.base import OnPolicy


class PPO(OnPolicy):
    """PPO with GAE, epochs of shuffled minibatches, and an optional KL early stop.

    L = E[min(r A, clip(r, 1 - eps, 1 + eps) A)] - value_loss_coef E[(R - V)^2] + entropy_coef E[H]
    with r = pi(a|s) / pi_old(a|s), A the (normalised) GAE advantage and R = A + V_old.
    All epochs and minibatches of an update run in one graph call.
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | tf.keras.Model | None = None,
        *,
        n_steps: int = 128,
        lam: float = 0.95,
        lr: float = 3e-4,
        clip_norm: float = 0.2,
        ppo_epochs: int = 4,
        mini_batches: int = 4,
        entropy_coef: float = 0.01,
        value_loss_coef: float = 0.5,
        grad_norm: float = 0.5,
        target_kl: float | None = None,
        normalize_advantages: bool = True,
        **kwargs,
    ) -> None:
        """
        Args:
            model: Actor-critic model: a .cfg file or a Keras model (default: packaged cfg).
            n_steps: Steps per env in each rollout.
            lam: GAE lambda.
            lr: Learning rate.
            clip_norm: Clipping range epsilon of the probability ratio.
            ppo_epochs: Passes over each rollout.
            mini_batches: Minibatches per pass (must divide n_steps * n_envs).
            entropy_coef: Weight of the entropy bonus.
            value_loss_coef: Weight of the value loss.
            grad_norm: Clip gradients to this global norm.
            target_kl: Stop an update's epochs early once the approximate KL exceeds 1.5x this.
            normalize_advantages: Normalise advantages within each minibatch.
        """
        super().__init__(envs, n_steps=n_steps, lam=lam, lr=lr, **kwargs)
        batch = n_steps * self.n_envs
        if batch % mini_batches:
            raise ValueError(
                f'expected mini_batches to divide n_steps * n_envs = {batch}, got {mini_batches}'
            )
        self.clip_norm, self.ppo_epochs, self.mini_batches = clip_norm, ppo_epochs, mini_batches
        self.entropy_coef, self.value_loss_coef, self.grad_norm = entropy_coef, value_loss_coef, grad_norm
        self.target_kl, self.normalize_advantages = target_kl, normalize_advantages
        self.minibatch_size = batch // mini_batches
        self.model = self.build_actor_critic(model)
        self.optimizer = self.make_optimizer('model', global_clipnorm=grad_norm)

    def minibatch_loss(self, observations, actions, old_log_probs, advantages, returns):
        """Clipped surrogate, value and entropy terms for one minibatch."""
        params, values = self.model(observations)
        log_probs, entropy = self.log_prob_entropy(params, actions)
        if self.normalize_advantages:
            advantages = (advantages - tf.reduce_mean(advantages)) / (tf.math.reduce_std(advantages) + 1e-8)
        log_ratio = log_probs - old_log_probs
        ratio = tf.exp(log_ratio)
        clipped = tf.clip_by_value(ratio, 1 - self.clip_norm, 1 + self.clip_norm)
        policy_loss = -tf.reduce_mean(tf.minimum(ratio * advantages, clipped * advantages))
        value_loss = tf.reduce_mean((returns - values[:, 0]) ** 2)
        entropy = tf.reduce_mean(entropy)
        loss = policy_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        # Schulman's low-variance estimator of KL(old || new): E[(r - 1) - log r].
        approx_kl = tf.reduce_mean(ratio - 1 - log_ratio)
        return loss, {'policy_loss': policy_loss, 'value_loss': value_loss, 'entropy': entropy,
                      'approx_kl': approx_kl}

    @tf.function
    def train_step(self, observations, actions, log_probs, advantages, returns) -> dict:
        size = self.minibatch_size
        variables = self.model.trainable_variables
        metrics = {name: tf.constant(0.0) for name in ('policy_loss', 'value_loss', 'entropy', 'approx_kl')}
        stop = tf.constant(False)
        for _ in tf.range(self.ppo_epochs):
            indices = tf.random.shuffle(tf.range(self.minibatch_size * self.mini_batches))
            for start in tf.range(0, self.minibatch_size * self.mini_batches, size):
                batch = indices[start:start + size]
                with tf.GradientTape() as tape:
                    loss, metrics = self.minibatch_loss(
                        tf.gather(observations, batch), tf.gather(actions, batch),
                        tf.gather(log_probs, batch), tf.gather(advantages, batch),
                        tf.gather(returns, batch),
                    )
                if self.target_kl is not None and metrics['approx_kl'] > 1.5 * self.target_kl:
                    stop = tf.constant(True)
                    break
                self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            if stop:
                break
        return metrics

"""Proximal policy optimisation (Schulman et al. 2017, arXiv 1707.06347), clipped objective."""
from __future__ import annotations

import functools

import gymnasium as gym
import keras
from keras import ops

from xagents import backend
from xagents.agent.on_policy import OnPolicy
from xagents.maths.optimization import minibatch_epochs, standardized
from xagents.networks.models import is_image_space


class PPO(OnPolicy):
    """PPO with GAE, epochs of shuffled minibatches, and an optional KL early stop.

    L = E[min(r A, clip(r, 1 - eps, 1 + eps) A)] - value_loss_coef E[(R - V)^2] + entropy_coef E[H]
    with r = pi(a|s) / pi_old(a|s), A the (normalised) GAE advantage and R = A + V_old.
    All epochs and minibatches of an update run in one graph call.
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | keras.Model | None = None,
        *,
        n_steps: int | None = None,
        lam: float = 0.95,
        lr: float = 3e-4,
        clip_range: float = 0.2,
        ppo_epochs: int | None = None,
        mini_batches: int | None = None,
        entropy_coef: float | None = None,
        value_loss_coef: float = 0.5,
        grad_norm: float = 0.5,
        target_kl: float | None = None,
        normalize_advantages: bool = True,
        recurrent: str | None = None,
        sequence_length: int | None = None,
        **kwargs,
    ) -> None:
        """
        Args:
            model: Actor-critic model: a .cfg file, or from Python a Keras model (default: packaged cfg).
            n_steps: Steps per env in each rollout (default: 256; Atari's 128 for image observations with discrete
                actions).
            lam: GAE lambda.
            lr: Learning rate.
            clip_range: Clipping range epsilon of the probability ratio.
            ppo_epochs: Passes over each rollout (default: 10; Atari's 4 for image observations with discrete actions).
            mini_batches: Minibatches per pass (must divide n_steps * n_envs; default: minibatches of about 64
                samples, Stable-Baselines3's batch_size; 4 for image observations with discrete actions, and for a
                recurrent policy).
            entropy_coef: Weight of the entropy bonus (default: 0.01; 0 for Box actions).
            value_loss_coef: Weight of the value loss.
            grad_norm: Clip gradients to this global norm.
            target_kl: Stop an update's epochs early once the approximate KL exceeds 1.5x this.
            normalize_advantages: Normalise advantages within each minibatch.
            recurrent: Give the policy memory, an lstm or gru layer (its size in the model's .cfg; default
                ann/cnn-model-recurrent.cfg): for envs that show only part of their state.
            sequence_length: Steps per training sequence of a recurrent policy (must divide n_steps; default
                n_steps, or the longest that gives every minibatch whole sequences); minibatches are then of whole
                sequences, and mini_batches must divide their number.
        """
        # Generic defaults follow the spaces: Atari's rollout and epochs for pictures with discrete actions,
        # Stable-Baselines3's (2,048 steps a rollout over 8 envs, 10 epochs of minibatches of 64) for anything else;
        # an entropy bonus of 0.01 for discrete actions, none for Box actions.
        box = isinstance(envs.single_action_space, gym.spaces.Box)
        atari = is_image_space(envs.single_observation_space) and not box
        n_steps = n_steps if n_steps is not None else 128 if atari else 256
        ppo_epochs = ppo_epochs if ppo_epochs is not None else 4 if atari else 10
        entropy_coef = entropy_coef if entropy_coef is not None else 0.0 if box else 0.01
        super().__init__(envs, n_steps=n_steps, lam=lam, lr=lr, **kwargs)
        if mini_batches is None:
            rows = self.n_envs * self.n_steps
            mini_batches = 4 if recurrent or atari else min(
                (count for count in range(1, rows + 1) if rows % count == 0), key=lambda count: abs(rows / count - 64))
        rows = self.setup_recurrence(recurrent, sequence_length, mini_batches)
        if rows % mini_batches:
            counted = (f'the n_envs * n_steps / sequence_length = {rows} sequences' if recurrent
                       else f'n_steps * n_envs = {rows}')
            raise ValueError(f'expected mini_batches to divide {counted}, got {mini_batches}')
        self.clip_range, self.ppo_epochs, self.mini_batches = clip_range, ppo_epochs, mini_batches
        self.entropy_coef, self.value_loss_coef, self.grad_norm = entropy_coef, value_loss_coef, grad_norm
        self.target_kl, self.normalize_advantages = target_kl, normalize_advantages
        self.minibatch_size = rows // mini_batches  # samples, or sequences of a recurrent policy
        self.model = self.build_actor_critic(model)
        self.optimizer = self.make_optimizer('model', global_clipnorm=grad_norm)

    def minibatch_loss(self, observations, actions, old_log_probs, advantages, returns, action_masks=None,
                       sequences=None):
        """Clipped surrogate, value and entropy terms for one minibatch (within its action masks, if any; over
        whole sequences for a recurrent policy)."""
        params, values = self.policy_value(observations, sequences)
        log_probs, entropy = self.log_prob_entropy(params, actions, action_masks)
        if self.normalize_advantages:
            advantages = standardized(advantages)
        log_ratio = log_probs - old_log_probs
        ratio = ops.exp(log_ratio)
        clipped = ops.clip(ratio, 1 - self.clip_range, 1 + self.clip_range)
        policy_loss = -ops.mean(ops.minimum(ratio * advantages, clipped * advantages))
        value_loss = ops.mean((returns - values[:, 0]) ** 2)
        entropy = ops.mean(entropy)
        loss = policy_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        # Schulman's low-variance estimator of KL(old || new): E[(r - 1) - log r].
        approx_kl = ops.mean(ratio - 1 - log_ratio)
        return loss, {'policy_loss': policy_loss, 'value_loss': value_loss, 'entropy': entropy,
                      'approx_kl': approx_kl}

    def minibatch_update(self, columns: dict, indices) -> tuple[dict, object]:
        """One minibatch's gradient step; ``(metrics, stop)``, ``stop`` true where the KL early stop (target_kl)
        holds it back, and every minibatch after it."""
        variables = self.model.trainable_variables
        (_, metrics), gradients = backend.value_and_grad(
            lambda: self.minibatch_loss(**self.minibatch_of(columns, indices)), variables)

        def apply():
            self.optimizer.apply(gradients, variables)
            return ops.convert_to_tensor(False)

        if self.target_kl is None:
            return metrics, apply()
        stop = metrics['approx_kl'] > 1.5 * self.target_kl
        return metrics, backend.cond(stop, lambda: ops.convert_to_tensor(True), apply)

    @backend.compiled_method
    def train_step(self, observations, actions, log_probs, advantages, returns, action_masks=None,
                   sequences=None) -> dict:
        columns = self.named_columns(observations, actions, log_probs, advantages, returns, action_masks, sequences)
        metrics = {name: ops.convert_to_tensor(0.0) for name in ('policy_loss', 'value_loss', 'entropy', 'approx_kl')}
        return minibatch_epochs(self.ppo_epochs, self.minibatch_size * self.mini_batches, self.minibatch_size,
                                functools.partial(self.minibatch_update, columns), metrics, self.graph_random)

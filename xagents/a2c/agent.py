"""Advantage actor-critic (Mnih et al. 2016, arXiv 1602.01783), synchronous."""
from __future__ import annotations

import gymnasium as gym
import keras
from keras import ops

from xagents import backend
from xagents.agent.on_policy import OnPolicy
from xagents.maths.rmsprop import RMSpropTF1


OPTIMIZERS = ('rmsprop', 'adam')


class A2C(OnPolicy):
    """A2C: n-step returns, one gradient step per rollout, entropy bonus.

    loss = -E[log pi(a|s) * A] + value_loss_coef * E[(R - V(s))^2] - entropy_coef * E[H(pi(.|s))]
    with A = R - V(s) and R the n-step (lam=1) or GAE return. The optimizer is RMSProp as the
    paper's and Baselines' TensorFlow 1 computes it (:class:`RMSpropTF1`: decay 0.99, epsilon 1e-5
    inside the square root, the squared-gradient average starting at ones) after clipping the
    gradients' global norm to ``grad_norm``, or Adam.
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | keras.Model | None = None,
        *,
        n_steps: int = 5,
        lam: float = 1.0,
        lr: float = 7e-4,
        entropy_coef: float = 0.01,
        value_loss_coef: float = 0.5,
        grad_norm: float = 0.5,
        optimizer: str = 'rmsprop',
        rmsprop_alpha: float = 0.99,
        rmsprop_epsilon: float = 1e-5,
        recurrent: str | None = None,
        sequence_length: int | None = None,
        **kwargs,
    ) -> None:
        """
        Args:
            model: Actor-critic model: a .cfg file, or from Python a Keras model (default: packaged cfg).
            n_steps: Steps per env in each rollout.
            lam: GAE lambda; 1 gives the n-step returns of the paper.
            lr: Learning rate.
            entropy_coef: Weight of the entropy bonus.
            value_loss_coef: Weight of the value loss.
            grad_norm: Clip gradients to this global norm.
            optimizer: rmsprop (the paper's, as TensorFlow 1 computes it) or adam (with opt_epsilon,
                beta1 and beta2).
            rmsprop_alpha: RMSProp decay of the squared-gradient average.
            rmsprop_epsilon: RMSProp epsilon, added inside the square root.
            recurrent: Give the policy memory, an lstm or gru layer (its size in the model's .cfg; default
                ann/cnn-model-recurrent.cfg): for envs that show only part of their state.
            sequence_length: Steps per training sequence of a recurrent policy (must divide n_steps; default
                n_steps).
        """
        super().__init__(envs, n_steps=n_steps, lam=lam, lr=lr, **kwargs)
        self.setup_recurrence(recurrent, sequence_length)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f'expected optimizer {" or ".join(OPTIMIZERS)}, got {optimizer!r}')
        self.entropy_coef, self.value_loss_coef, self.grad_norm = entropy_coef, value_loss_coef, grad_norm
        self.model = self.build_actor_critic(model)
        rmsprop = RMSpropTF1(lr, rho=rmsprop_alpha, epsilon=rmsprop_epsilon,
                             global_clipnorm=grad_norm) if optimizer == 'rmsprop' else None
        self.optimizer = self.make_optimizer('model', rmsprop, global_clipnorm=grad_norm)

    @backend.compiled_method
    def train_step(self, observations, actions, log_probs, advantages, returns, action_masks=None,
                   sequences=None) -> dict:
        # The whole rollout (a recurrent policy's sequences flattened, env-major).
        batch = self.minibatch_of(self.named_columns(observations, actions, log_probs, advantages, returns,
                                                     action_masks, sequences))

        def loss():
            params, values = self.policy_value(batch['observations'], sequences)
            new_log_probs, entropy = self.log_prob_entropy(params, batch['actions'], batch.get('action_masks'))
            policy_loss = -ops.mean(new_log_probs * batch['advantages'])
            value_loss = ops.mean((batch['returns'] - values[:, 0]) ** 2)
            entropy = ops.mean(entropy)
            metrics = {'policy_loss': policy_loss, 'value_loss': value_loss, 'entropy': entropy}
            return policy_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy, metrics

        variables = self.model.trainable_variables
        (_, metrics), gradients = backend.value_and_grad(loss, variables)
        self.optimizer.apply(gradients, variables)
        return metrics

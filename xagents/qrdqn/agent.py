"""Quantile regression DQN (Dabney et al. 2018, https://arxiv.org/abs/1710.10044): DQN learning a distribution of
returns, as ``n_quantiles`` quantiles per action, instead of its mean."""
from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.dqn.agent import DQN
from xagents.envs.masks import masked_logits
from xagents.maths.losses import quantile_huber_loss
from xagents.networks.models import Output, is_image_space
from xagents.utils.memory import check_quantile_pairs


class QRDQN(DQN):
    """QR-DQN: each action's return is ``n_quantiles`` equally likely values ``theta_i(s, a)``, the quantiles at
    the midpoint fractions ``tau_i = (2i + 1) / 2N``; Q(s, a) is their mean, which the greedy action maximises.

    loss = E[w * sum_i mean_j rho_tau_i(T_j - theta_i(s, a))],  T_j = R + discount * theta_j^targ(s', a*)
    with ``rho`` the quantile Huber loss (kappa = 1), ``a* = argmax_a' Q_pick(s', a')`` (the target network,
    or the online one with ``double``), ``R`` and ``discount`` the n-step return and ``gamma ** k`` (0 after a
    termination) from the buffer, and ``w`` the prioritised-replay weights, whose priorities are the
    differences of the means, ``Q(s, a) - mean_j T_j``.
    ``dueling`` gives each quantile a value and centred advantages: ``theta_i = V_i + A_i - mean_a A_i``.
    Everything else (exploration, targets, masks, n-step returns, prioritised replay, Dict observations) is DQN's.
    """

    metric_names = ('loss', 'q')

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | keras.Model | None = None,
        *,
        n_quantiles: int = 200,
        lr: float | None = None,
        opt_epsilon: float = 3.125e-4,
        **kwargs,
    ) -> None:
        """
        Args:
            model: Quantile network: a .cfg file, or from Python a Keras model with ``n_actions * n_quantiles``
                outputs (``n_quantiles`` for the value head of a dueling model) (default: DQN's packaged cfg).
            n_quantiles: Quantiles estimated per action (the paper's N).
            lr: Learning rate (default: 6.3e-4, as its Acrobot preset; 5e-5 for image observations, the paper's).
            opt_epsilon: Adam epsilon (the paper's 0.01 / 32, for its batch of 32).
        """
        self.n_quantiles = n_quantiles
        if lr is None:
            lr = 5e-5 if is_image_space(envs.single_observation_space) else 6.3e-4
        super().__init__(envs, model, lr=lr, opt_epsilon=opt_epsilon, **kwargs)

    def q_outputs(self) -> list[Output]:
        check_quantile_pairs(f'--n-quantiles {self.n_quantiles:,}', self.buffer_batch_size, self.n_quantiles,
                             self.n_quantiles, 'lower --n-quantiles (or --buffer-batch-size)')
        if self.dueling:
            return [Output('value', self.n_quantiles), Output('advantage', self.n_actions * self.n_quantiles)]
        return [Output('quantiles', self.n_actions * self.n_quantiles)]

    def quantiles(self, model: keras.Model, observations):
        """``(batch, n_actions, n_quantiles)`` quantiles of ``model``'s return distributions."""
        shape = (-1, self.n_actions, self.n_quantiles)
        if self.dueling:
            value, advantage = model(observations)
            advantage = ops.reshape(advantage, shape)
            return ops.reshape(value, (-1, 1, self.n_quantiles)) + advantage - ops.mean(advantage, 1, keepdims=True)
        return ops.reshape(model(observations), shape)

    def q_values(self, model: keras.Model, observations):
        return ops.mean(self.quantiles(model, observations), -1)

    def q_values_np(self, observations: np.ndarray) -> np.ndarray:
        outputs = [np.reshape(output, (len(output), -1, self.n_quantiles)) for output in self.forward(observations)]
        if self.dueling:
            value, advantage = outputs
            return (value + advantage - advantage.mean(1, keepdims=True)).mean(-1)
        return outputs[0].mean(-1)

    def next_quantiles(self, next_observations, next_action_masks=None):
        """``(batch, n_quantiles)`` the target network's quantiles at ``a* = argmax_a' Q_pick(s', a')``, the argmax
        over the actions ``next_action_masks`` allows."""
        next_quantiles = self.quantiles(self.target_model, next_observations)
        picked = self.q_values(self.model, next_observations) if self.double else ops.mean(next_quantiles, -1)
        return taken(next_quantiles, ops.argmax(masked_logits(picked, next_action_masks), -1))

    def next_values(self, next_observations, next_action_masks=None):
        return ops.mean(self.next_quantiles(next_observations, next_action_masks), -1)

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                   action_masks=None, next_action_masks=None):
        next_quantiles = self.next_quantiles(next_observations, next_action_masks)
        targets = ops.stop_gradient(rewards[:, None] + discounts[:, None] * next_quantiles)

        def quantile_loss():
            current = taken(self.quantiles(self.model, observations), actions)
            return ops.mean(weights * quantile_huber_loss(current, targets)), current

        variables = self.model.trainable_variables
        (loss, current), gradients = backend.value_and_grad(quantile_loss, variables)
        self.optimizer.apply(gradients, variables)
        q = ops.mean(current, -1)
        return {'loss': loss, 'q': ops.mean(q)}, q - ops.mean(targets, -1)


def taken(quantiles, actions):
    """``(batch, n_quantiles)`` the quantiles of ``(batch, n_actions, n_quantiles)`` at ``(batch,)`` ``actions``."""
    return ops.take_along_axis(quantiles, ops.cast(actions, 'int32')[:, None, None], axis=1)[:, 0]

"""Distributions over several discrete choices made at once: ``MultiDiscrete`` and ``MultiBinary`` actions.

As :mod:`xagents.utils.distributions`: sampling in NumPy for acting, log-prob/entropy/KL in TensorFlow for
updates, each over a batch ``B``. The choices are independent given the state (Stable-Baselines3's
``MultiCategoricalDistribution`` and ``BernoulliDistribution``), so a joint log-probability, entropy or KL
is the sum of the per-choice ones. Actions are flat ``(B, k)`` integer arrays, each choice from 0; the
agent reshapes them to the space's shape and adds ``MultiDiscrete``'s ``start`` only when sending them to
the env.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from xagents.utils.quiet_tensorflow import tf

# Logits of the padding entries of the shorter sub-spaces: exp() is exactly 0 in float32 and, unlike -inf,
# 0 * (padding) stays 0 in entropies and KLs.
PADDING = -1e9


class MultiCategorical:
    """Independent categoricals over ``MultiDiscrete(nvec)`` actions: one logits head of ``sum(nvec)`` units,
    split into ``nvec[i]`` logits per sub-space (in the order of ``nvec.ravel()``).

    The split is done by gathering the logits into a ``(B, k, max(nvec))`` block padded with
    :data:`PADDING`, so sampling, log-probs and entropies run over all sub-spaces at once.
    """

    def __init__(self, space: gym.spaces.MultiDiscrete) -> None:
        self.nvec = space.nvec.ravel().astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        columns = np.arange(self.nvec.max())
        self.valid = columns < self.nvec[:, None]  # (k, max n): which padded entries are real
        self.index = np.where(self.valid, offsets[:, None] + columns, 0)  # (k, max n) into the flat logits

    def output_units(self) -> int:
        return int(self.nvec.sum())

    def padded_np(self, logits: np.ndarray) -> np.ndarray:
        """``(B, sum(nvec))`` logits as a ``(B, k, max(nvec))`` block, padding at ``-inf``."""
        return np.where(self.valid, logits[:, self.index], -np.inf)

    def padded(self, logits: tf.Tensor) -> tf.Tensor:
        return tf.where(self.valid, tf.gather(logits, self.index, axis=1), PADDING)

    def sample_np(self, logits: np.ndarray, rng: np.random.Generator, deterministic: bool = False):
        """Sample actions ``(B, k)`` (Gumbel-max per sub-space) and return ``(actions, log_probs)``."""
        padded = self.padded_np(np.asarray(logits, np.float64))
        if deterministic:
            actions = padded.argmax(-1)
        else:
            actions = (padded - np.log(-np.log(rng.random(padded.shape)))).argmax(-1)
        shifted = padded - padded.max(-1, keepdims=True)
        log_probs = (np.take_along_axis(shifted, actions[..., None], -1)[..., 0]
                     - np.log(np.exp(shifted).sum(-1)))
        return actions, log_probs.sum(-1).astype(np.float32)

    def log_prob(self, logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        log_probs = tf.nn.log_softmax(self.padded(logits))
        chosen = tf.gather(log_probs, tf.cast(actions, tf.int32)[..., None], batch_dims=2)[..., 0]
        return tf.reduce_sum(chosen, -1)

    def entropy(self, logits: tf.Tensor) -> tf.Tensor:
        log_probs = tf.nn.log_softmax(self.padded(logits))
        return -tf.reduce_sum(tf.exp(log_probs) * log_probs, [-2, -1])

    def kl(self, old_logits: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """KL(old || new) per sample: the sum over sub-spaces."""
        old_log_probs = tf.nn.log_softmax(self.padded(old_logits))
        new_log_probs = tf.nn.log_softmax(self.padded(logits))
        return tf.reduce_sum(tf.exp(old_log_probs) * (old_log_probs - new_log_probs), [-2, -1])

    def mode(self, logits: tf.Tensor) -> tf.Tensor:
        """The most likely action ``(B, k)``: the argmax of each sub-space (graph mode)."""
        return tf.argmax(self.padded(logits), -1)


def _log_sigmoid_np(logits: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -logits)


class MultiBernoulli:
    """Independent Bernoullis over ``MultiBinary(n)`` actions: one logit per bit, ``P(bit = 1) = sigmoid(logit)``."""

    def __init__(self, space: gym.spaces.MultiBinary) -> None:
        self.bits = int(np.prod(space.shape))

    def output_units(self) -> int:
        return self.bits

    def sample_np(self, logits: np.ndarray, rng: np.random.Generator, deterministic: bool = False):
        """Sample bits ``(B, n)`` and return ``(actions, log_probs)``."""
        logits = np.asarray(logits, np.float64)
        if deterministic:
            actions = logits > 0
        else:
            actions = rng.random(logits.shape) < 1 / (1 + np.exp(-logits))
        log_probs = np.where(actions, _log_sigmoid_np(logits), _log_sigmoid_np(-logits)).sum(-1)
        return actions.astype(np.int8), log_probs.astype(np.float32)

    def log_prob(self, logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        # log sigmoid(l) if the bit is 1, log sigmoid(-l) if 0: minus the logistic loss.
        bits = tf.cast(actions, logits.dtype)
        return -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=bits, logits=logits), -1)

    def entropy(self, logits: tf.Tensor) -> tf.Tensor:
        p = tf.sigmoid(logits)
        return tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=logits), -1)

    def kl(self, old_logits: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """KL(old || new) per sample: cross-entropy of new under old minus old's entropy, summed over bits."""
        p = tf.sigmoid(old_logits)
        return tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=logits)
                             - tf.nn.sigmoid_cross_entropy_with_logits(labels=p, logits=old_logits), -1)

    def mode(self, logits: tf.Tensor) -> tf.Tensor:
        """The most likely bits ``(B, n)``: 1 where the logit is positive (graph mode)."""
        return tf.cast(logits > 0, tf.int64)

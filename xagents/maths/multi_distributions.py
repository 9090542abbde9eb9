"""Distributions over several discrete choices made at once: ``MultiDiscrete`` and ``MultiBinary`` actions.

As :mod:`xagents.maths.distributions`: sampling in NumPy for acting, log-prob/entropy/KL in ``keras.ops`` (any
Keras backend) for updates, each over a batch ``B``. The choices are independent given the state (Stable-Baselines3's
``MultiCategoricalDistribution`` and ``BernoulliDistribution``), so a joint log-probability, entropy or KL
is the sum of the per-choice ones. Actions are flat ``(B, k)`` integer arrays, each choice from 0; the
agent reshapes them to the space's shape and adds ``MultiDiscrete``'s ``start`` only when sending them to
the env.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import xagents.utils.quiet_keras  # noqa: F401  (first: Keras loads quietly)
from keras import ops

Tensor = Any  # a tensor of the Keras backend (tf.Tensor, jax.Array), or what converts to one

# The dtype of the actions graph methods return (the mode): what exports give. JAX without x64 gives int32.
ACTION_DTYPE = 'int64'


def argmax(values: Tensor) -> Tensor:
    """The index of the largest entry of the last axis (the first of ties), as :data:`ACTION_DTYPE` (graph mode).

    The smallest index holding the maximum, as ``tf.argmax`` and NumPy pick, on every backend: ``keras.ops.argmax``
    on TensorFlow tells -0.0 below 0.0 through a ``Bitcast`` that ONNX exports cannot convert, XLA's ``top_k`` (JAX)
    orders the two zeros, and PyTorch's ``argmax`` and ``topk`` may return any of tied entries.
    """
    size = values.shape[-1]
    first = ops.min(ops.where(values == ops.max(values, -1, keepdims=True), ops.arange(size), size), -1)
    return ops.cast(ops.minimum(first, size - 1), ACTION_DTYPE)  # (NaN everywhere: the last index, not beyond)

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

    def padded(self, logits: Tensor) -> Tensor:
        """:meth:`padded_np` in graph ops, padding at :data:`PADDING`."""
        return ops.where(self.valid, ops.take(logits, self.index, axis=1), PADDING)

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

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        """``(B,)`` joint log-probabilities of ``(B, k)`` actions."""
        log_probs = ops.log_softmax(self.padded(logits))
        chosen = ops.take_along_axis(log_probs, ops.cast(actions, 'int32')[..., None], axis=-1)[..., 0]
        return ops.sum(chosen, -1)

    def entropy(self, logits: Tensor) -> Tensor:
        log_probs = ops.log_softmax(self.padded(logits))
        return -ops.sum(ops.exp(log_probs) * log_probs, (-2, -1))

    def kl(self, old_logits: Tensor, logits: Tensor) -> Tensor:
        """KL(old || new) per sample: the sum over sub-spaces."""
        old_log_probs = ops.log_softmax(self.padded(old_logits))
        new_log_probs = ops.log_softmax(self.padded(logits))
        return ops.sum(ops.exp(old_log_probs) * (old_log_probs - new_log_probs), (-2, -1))

    def mode(self, logits: Tensor) -> Tensor:
        """The most likely action ``(B, k)``: the argmax of each sub-space (graph mode)."""
        return argmax(self.padded(logits))


def _log_sigmoid_np(logits: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -logits)


def logistic_loss(labels: Tensor, logits: Tensor) -> Tensor:
    """``-labels log sigmoid(logits) - (1 - labels) log sigmoid(-logits)`` per element, written as TensorFlow's
    ``sigmoid_cross_entropy_with_logits`` is (``max(x, 0) - x z + log1p(exp(-|x|))``), so that it never overflows
    and gives its numbers. ``max`` and ``-|x|`` are chosen with ``x >= 0``, as there: their gradients at ``x = 0``
    (1 and -1) add up to the right one, ``sigmoid(0) - z``, where ``abs``' 0 would give ``1 - z``."""
    positive = logits >= 0
    return (ops.where(positive, logits, 0.0) - logits * labels
            + ops.log1p(ops.exp(ops.where(positive, -logits, logits))))


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

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        """``(B,)`` joint log-probabilities of ``(B, n)`` bits."""
        # log sigmoid(l) if the bit is 1, log sigmoid(-l) if 0: minus the logistic loss.
        bits = ops.cast(actions, logits.dtype)
        return -ops.sum(logistic_loss(bits, logits), -1)

    def entropy(self, logits: Tensor) -> Tensor:
        p = ops.sigmoid(logits)
        return ops.sum(logistic_loss(p, logits), -1)

    def kl(self, old_logits: Tensor, logits: Tensor) -> Tensor:
        """KL(old || new) per sample: cross-entropy of new under old minus old's entropy, summed over bits."""
        p = ops.sigmoid(old_logits)
        return ops.sum(logistic_loss(p, logits) - logistic_loss(p, old_logits), -1)

    def mode(self, logits: Tensor) -> Tensor:
        """The most likely bits ``(B, n)``: 1 where the logit is positive (graph mode)."""
        return ops.cast(logits > 0, ACTION_DTYPE)

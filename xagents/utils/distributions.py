"""Action distributions: sampling in NumPy for acting, log-prob/entropy/KL in TensorFlow for updates.

TensorFlow Probability does not support Keras 3, and each of these is a few lines.
A categorical distribution is parameterised by logits ``(B, n)``; a diagonal Gaussian by a
mean ``(B, d)`` and a state-independent ``log_std`` ``(d,)``.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import tensorflow as tf

LOG_2PI = math.log(2 * math.pi)


class Categorical:
    """Distribution over ``Discrete(n)`` actions."""

    def output_units(self) -> int:
        return self.n

    def __init__(self, space: gym.spaces.Discrete) -> None:
        self.n = int(space.n)

    def sample_np(self, logits: np.ndarray, rng: np.random.Generator, deterministic: bool = False):
        """Sample actions (Gumbel-max) and return ``(actions, log_probs)``."""
        if deterministic:
            actions = logits.argmax(-1)
        else:
            actions = (logits - np.log(-np.log(rng.random(logits.shape)))).argmax(-1)
        shifted = logits - logits.max(-1, keepdims=True)
        log_norm = np.log(np.exp(shifted).sum(-1))
        log_probs = shifted[np.arange(len(actions)), actions] - log_norm
        return actions, log_probs.astype(np.float32)

    def log_prob(self, logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        log_probs = tf.nn.log_softmax(logits)
        return tf.gather(log_probs, tf.cast(actions, tf.int32), batch_dims=1)

    def entropy(self, logits: tf.Tensor) -> tf.Tensor:
        log_probs = tf.nn.log_softmax(logits)
        return -tf.reduce_sum(tf.exp(log_probs) * log_probs, -1)

    def kl(self, old_logits: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """KL(old || new) per sample."""
        old_log_probs = tf.nn.log_softmax(old_logits)
        return tf.reduce_sum(tf.exp(old_log_probs) * (old_log_probs - tf.nn.log_softmax(logits)), -1)


class DiagGaussian:
    """Distribution over ``Box`` actions with a learned state-independent standard deviation.

    Actions are sampled unbounded and clipped to the space's bounds only when sent to the env,
    as Stable-Baselines3 does, so log-probs stay those of the sampled values.
    """

    def __init__(self, space: gym.spaces.Box) -> None:
        self.dim = int(np.prod(space.shape))
        self.shape, self.low, self.high = space.shape, space.low.ravel(), space.high.ravel()

    def output_units(self) -> int:
        return self.dim

    def sample_np(self, mean: np.ndarray, log_std: np.ndarray, rng: np.random.Generator,
                  deterministic: bool = False):
        if deterministic:
            return mean.astype(np.float32), np.zeros(len(mean), np.float32)
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        actions = mean + np.exp(log_std) * noise
        log_probs = -0.5 * (noise**2).sum(-1) - log_std.sum() - 0.5 * self.dim * LOG_2PI
        return actions.astype(np.float32), log_probs.astype(np.float32)

    def log_prob(self, mean: tf.Tensor, log_std: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        z = (actions - mean) * tf.exp(-log_std)
        return -0.5 * tf.reduce_sum(z**2, -1) - tf.reduce_sum(log_std) - 0.5 * self.dim * LOG_2PI

    def entropy(self, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
        return tf.fill(tf.shape(mean)[:1], tf.reduce_sum(log_std) + 0.5 * self.dim * (1 + LOG_2PI))

    def kl(self, old_mean, old_log_std, mean, log_std) -> tf.Tensor:
        """KL(old || new) per sample."""
        old_var, var = tf.exp(2 * old_log_std), tf.exp(2 * log_std)
        terms = log_std - old_log_std + (old_var + (old_mean - mean) ** 2) / (2 * var) - 0.5
        return tf.reduce_sum(terms, -1)

    def clip(self, actions: np.ndarray) -> np.ndarray:
        """``(B, dim)`` sampled actions as the env takes them: clipped to the bounds, in the space's shape."""
        return np.clip(actions, self.low, self.high).reshape((len(actions),) + self.shape)


def distribution_for(space: gym.Space) -> Categorical | DiagGaussian:
    """The action distribution of a Discrete or Box action space."""
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(space)
    if isinstance(space, gym.spaces.Box):
        return DiagGaussian(space)
    raise ValueError(f'expected a Discrete or Box action space, got {space}')

"""Action distributions: sampling in NumPy for acting, log-prob/entropy/KL in ``keras.ops`` for updates.

The graph methods run on any Keras backend (TensorFlow, JAX), eagerly or compiled; TensorFlow Probability
does not support Keras 3, and each of these is a few lines. Arrays are the backend's tensors (``Tensor``).
A categorical distribution is parameterised by logits ``(B, n)``; a diagonal Gaussian by a
mean ``(B, d)`` and a ``log_std``: state-independent ``(d,)``, or per sample ``(B, d)`` with
state-dependent exploration (:class:`StateDependentNoise`).
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import xagents.utils.quiet_keras  # noqa: F401  (first: Keras loads quietly)
from keras import ops

from xagents.maths.multi_distributions import MultiBernoulli, MultiCategorical, Tensor, argmax

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

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        """``(B,)`` log-probabilities of ``(B,)`` actions under ``(B, n)`` logits."""
        log_probs = ops.log_softmax(logits)
        return ops.take_along_axis(log_probs, ops.cast(actions, 'int32')[..., None], axis=-1)[..., 0]

    def entropy(self, logits: Tensor) -> Tensor:
        log_probs = ops.log_softmax(logits)
        return -ops.sum(ops.exp(log_probs) * log_probs, -1)

    def kl(self, old_logits: Tensor, logits: Tensor) -> Tensor:
        """KL(old || new) per sample."""
        old_log_probs = ops.log_softmax(old_logits)
        return ops.sum(ops.exp(old_log_probs) * (old_log_probs - ops.log_softmax(logits)), -1)

    def mode(self, logits: Tensor) -> Tensor:
        """The most likely action ``(B,)`` (graph mode)."""
        return argmax(logits)


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
        return self.with_log_probs(mean + np.exp(log_std) * noise, noise, log_std)

    def with_log_probs(self, actions: np.ndarray, noise: np.ndarray, log_std: np.ndarray):
        """``(actions, log_probs)`` of actions ``mean + std * noise``."""
        log_probs = -0.5 * (noise**2).sum(-1) - log_std.sum(-1) - 0.5 * self.dim * LOG_2PI
        return actions.astype(np.float32), log_probs.astype(np.float32)

    def log_prob(self, mean: Tensor, log_std: Tensor, actions: Tensor) -> Tensor:
        """``(B,)`` log-densities of ``(B, d)`` actions; ``log_std`` ``(d,)`` or ``(B, d)``."""
        z = (actions - mean) * ops.exp(-log_std)
        return -0.5 * ops.sum(z**2, -1) - ops.sum(log_std, -1) - 0.5 * self.dim * LOG_2PI

    def entropy(self, mean: Tensor, log_std: Tensor) -> Tensor:
        per_sample = ops.sum(log_std + ops.zeros_like(mean), -1)  # (d,) or (B, d) log_std
        return per_sample + 0.5 * self.dim * (1 + LOG_2PI)

    def kl(self, old_mean: Tensor, old_log_std: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
        """KL(old || new) per sample."""
        old_var, var = ops.exp(2 * old_log_std), ops.exp(2 * log_std)
        terms = log_std - old_log_std + (old_var + (old_mean - mean) ** 2) / (2 * var) - 0.5
        return ops.sum(terms, -1)

    def mode(self, mean: Tensor) -> Tensor:
        """The most likely action: the mean (graph mode)."""
        return mean

    def clip(self, actions: np.ndarray) -> np.ndarray:
        """``(B, dim)`` sampled actions as the env takes them: clipped to the bounds, in the space's shape."""
        return np.clip(actions, self.low, self.high).reshape((len(actions),) + self.shape)


class StateDependentNoise:
    """Generalised state-dependent exploration (gSDE, Raffin et al. 2021, https://arxiv.org/abs/2005.05719).

    The noise of the actions before any squashing is ``f(s) E``: ``f(s)`` the policy's last hidden
    activations ``(B, F)`` and ``E`` a ``(F, d)`` matrix of ``N(0, sigma^2)`` entries, ``log sigma``
    learned. While ``E`` is held, the same state gives the same action; over draws of ``E`` the
    actions are Gaussian with ``std^2 = f(s)^2 sigma^2`` per action dimension. Each env acts with a
    matrix of its own, drawn at the start of every collection (:meth:`reset`, so that it comes from the
    sigma the collected log-probabilities use) and then every ``sample_freq`` steps within it, as
    Stable-Baselines3's ``collect_rollouts`` does.

    Features and the noise computed from them are float32 whatever the model's precision: a bf16 model's
    features squared and multiplied in bfloat16 would move log-probabilities by ~3e-3 between acting and
    learning.
    """

    EPSILON = 1e-6  # added to the variance, as Stable-Baselines3 does

    def __init__(self, sample_freq: int | None = None, expln: bool = False) -> None:
        self.sample_freq, self.expln = sample_freq, expln
        self.matrices: np.ndarray | None = None  # (envs, F, d), drawn when acting
        self.steps_held = 0

    @classmethod
    def sigma(cls, log_sigma: Tensor, expln: bool = False) -> Tensor:
        """``sigma`` from its learned log (graph mode): ``exp``, or with ``expln`` (Stable-Baselines3's
        ``use_expln``) ``exp`` up to 0 and ``log1p(log sigma) + 1`` above, so that sigma grows slowly past 1."""
        if not expln:
            return ops.exp(log_sigma)
        return ops.where(log_sigma <= 0, ops.exp(ops.minimum(log_sigma, 0.0)),
                         ops.log1p(ops.maximum(log_sigma, 0.0) + cls.EPSILON) + 1.0)

    @classmethod
    def sigma_np(cls, log_sigma: np.ndarray, expln: bool = False) -> np.ndarray:
        if not expln:
            return np.exp(log_sigma)
        return np.where(log_sigma <= 0, np.exp(np.minimum(log_sigma, 0.0)),
                        np.log1p(np.maximum(log_sigma, 0.0) + cls.EPSILON) + 1.0).astype(log_sigma.dtype)

    @classmethod
    def log_std(cls, features: Tensor, log_sigma: Tensor, learn_features: bool = False,
                expln: bool = False) -> Tensor:
        """Per-sample ``log std`` ``(B, d)`` of the actions (graph mode). The features get gradients only
        with ``learn_features`` (Stable-Baselines3's SAC learns them, its PPO and A2C do not)."""
        features = ops.cast(features, 'float32')
        if not learn_features:
            features = ops.stop_gradient(features)
        return 0.5 * ops.log(ops.matmul(features ** 2, cls.sigma(log_sigma, expln) ** 2) + cls.EPSILON)

    @classmethod
    def log_std_np(cls, features: np.ndarray, log_sigma: np.ndarray) -> np.ndarray:
        features = np.asarray(features, np.float32)
        return 0.5 * np.log(features ** 2 @ np.exp(2.0 * log_sigma, dtype=np.float32) + cls.EPSILON)

    def noise(self, features: np.ndarray, log_sigma: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``f(s) E`` ``(B, d)`` with each env's held matrix, drawing new ones when they are due."""
        if (self.matrices is None or len(self.matrices) != len(features)
                or self.sample_freq and self.steps_held % self.sample_freq == 0):
            sigma = self.sigma_np(log_sigma, self.expln)
            self.matrices = sigma * rng.standard_normal((len(features),) + sigma.shape, dtype=np.float32)
            self.steps_held = 0
        self.steps_held += 1
        return np.einsum('bf,bfa->ba', np.asarray(features, np.float32), self.matrices)

    def reset(self) -> None:
        """New matrices at the next step, and ``sample_freq`` counted from it: a collection starts."""
        self.matrices = None


def distribution_for(space: gym.Space) -> Categorical | DiagGaussian | MultiCategorical | MultiBernoulli:
    """The action distribution of a Discrete, Box, MultiDiscrete or MultiBinary action space."""
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(space)
    if isinstance(space, gym.spaces.Box):
        return DiagGaussian(space)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategorical(space)
    if isinstance(space, gym.spaces.MultiBinary):
        return MultiBernoulli(space)
    raise ValueError(f'expected a Discrete, Box, MultiDiscrete or MultiBinary action space, got {space}')

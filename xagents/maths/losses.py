"""Regression losses of the value-based agents, in ``keras.ops``: Huber (DQN) and the quantile Huber loss of
distributional critics (QR-DQN)."""
from __future__ import annotations

from keras import ops


def huber(x, delta: float = 1.0):
    """Elementwise Huber loss: ``x**2 / 2`` within ``delta``, linear beyond."""
    absolute = ops.abs(x)
    return ops.where(absolute <= delta, 0.5 * ops.square(x), delta * (absolute - 0.5 * delta))


def quantile_midpoints(n: int):
    """``(n,)`` the fractions ``(2i + 1) / 2n`` that ``n`` quantile estimates stand for (Dabney et al. 2018, Lemma 2)."""
    return (ops.arange(n, dtype='float32') + 0.5) / n


def quantile_huber_loss(quantiles, targets):
    """Per-sample quantile Huber loss (Dabney et al. 2018, https://arxiv.org/abs/1710.10044, eq. 10, kappa = 1).

    ``rho(u) = |tau_i - 1{u < 0}| * huber(u)`` for every pair of an estimate ``theta_i`` (fraction ``tau_i``, the
    midpoints) and a target sample ``T_j``, ``u = T_j - theta_i``; summed over ``i`` and averaged over ``j``.

    Args:
        quantiles: ``(batch, n)`` the estimates being trained.
        targets: ``(batch, m)`` samples of the target distribution (gradients are not taken through them).

    Returns:
        ``(batch,)`` the loss of each sample.
    """
    errors = targets[:, None, :] - quantiles[:, :, None]  # (batch, n, m): u_ij
    fractions = quantile_midpoints(ops.shape(quantiles)[1])[None, :, None]
    weights = ops.abs(fractions - ops.cast(errors < 0, errors.dtype))
    return ops.sum(ops.mean(weights * huber(errors), axis=2), axis=1)

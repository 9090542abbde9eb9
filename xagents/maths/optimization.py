"""Maths shared by several agents' updates, in ``keras.ops``: flat parameter vectors, conjugate gradient, the ACER
trust-region projection, Retrace targets, advantage standardisation and epochs of shuffled minibatches.

Every function works eagerly and inside a compiled update on every backend (the loops are ``while_loop``s or
unroll over a static length), so agents call them from their ``train_step``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import keras
from keras import ops

from xagents import backend

Tensor = Any  # a backend tensor


def flat_concat(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenate tensors (e.g. gradients of several variables) into one 1-D vector."""
    return ops.concatenate([ops.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def assign_flat(variables: Sequence[keras.Variable], vector: Tensor) -> None:
    """Assign consecutive slices of the 1-D ``vector`` to ``variables``, in order.

    The inverse of ``flat_concat(variables)``: shapes come from the variables.
    """
    start = 0
    for variable in variables:
        size = math.prod(variable.shape)
        variable.assign(ops.reshape(vector[start:start + size], variable.shape))
        start += size


def conjugate_gradient(
    matrix_vector_product: Callable[[Tensor], Tensor],
    b: Tensor,
    iterations: int | Tensor,
    residual_tolerance: float | Tensor = 1e-10,
) -> Tensor:
    """Solve ``A x = b`` for a symmetric positive-definite ``A`` given only ``v -> A v``.

    Conjugate gradient (Nocedal & Wright, Numerical Optimization, algorithm 5.2), started at
    ``x = 0``, as TRPO uses it on Fisher-vector products (Schulman et al. 2015, appendix C).
    Runs as a ``while_loop``, so it stays in the compiled update that calls it.

    Args:
        matrix_vector_product: ``v -> A v`` for 1-D ``v`` shaped like ``b``.
        b: 1-D right-hand side.
        iterations: At most this many iterations (``A``'s size solves exactly, in exact arithmetic).
        residual_tolerance: Stop once the squared residual norm ``|b - A x|^2`` falls below it.

    Returns:
        The approximate solution ``x``, shaped like ``b``.
    """
    b = ops.convert_to_tensor(b)
    tolerance = ops.cast(residual_tolerance, b.dtype)

    def condition(i, x, r, p, r_dot_r):
        return ops.logical_and(i < iterations, r_dot_r >= tolerance)

    def body(i, x, r, p, r_dot_r):
        z = matrix_vector_product(p)
        alpha = r_dot_r / ops.sum(p * z)
        x = x + alpha * p
        r = r - alpha * z
        new_r_dot_r = ops.sum(r * r)
        p = r + (new_r_dot_r / r_dot_r) * p
        return i + 1, x, r, p, new_r_dot_r

    _, x, *_ = ops.while_loop(condition, body, (ops.convert_to_tensor(0), ops.zeros_like(b), b, b, ops.sum(b * b)))
    return x


def trust_region_projection(g: Tensor, k: Tensor, delta: float | Tensor) -> Tensor:
    """ACER's trust-region adjustment of a gradient, one row per sample (Wang et al. 2016, eq. 12).

    Solves ``min_z 0.5 |g - z|^2  s.t.  k . z <= delta`` in closed form:
    ``z = g - max(0, (k . g - delta) / |k|^2) k``.

    Args:
        g: ``(B, n)`` gradients of the objective with respect to the policy statistics.
        k: ``(B, n)`` gradients of ``KL(average policy || policy)`` with respect to the same.
        delta: The trust-region bound.

    Returns:
        ``(B, n)`` adjusted gradients ``z`` with ``k . z <= delta`` for every row.
    """
    k_dot_g = ops.sum(k * g, axis=-1, keepdims=True)
    k_norm = ops.sum(k * k, axis=-1, keepdims=True)
    scale = ops.maximum(0.0, (k_dot_g - delta) / ops.maximum(k_norm, 1e-12))
    return g - scale * k


def retrace_targets(
    rewards: Tensor,
    dones: Tensor,
    q_taken: Tensor,
    values: Tensor,
    truncated_rhos: Tensor,
    last_values: Tensor,
    gamma: float | Tensor,
) -> Tensor:
    """Retrace targets ``Q^ret`` for ``T`` consecutive steps of ``N`` envs (Munos et al. 2016).

    As ACER computes them (Wang et al. 2016, arXiv 1611.01224, eq. 5 and algorithm 2), backwards
    from the bootstrap ``Q^ret = V(x_T)``::

        Q^ret_t     = r_t + gamma * (1 - done_t) * Q^ret_{t+1}'
        Q^ret_{t}'  = rho_bar_t * (Q^ret_t - Q(x_t, a_t)) + V(x_t)

    where ``Q^ret'`` is what step ``t - 1`` bootstraps from and ``rho_bar_t = min(1, rho_t)``.

    Args:
        rewards: ``(T, N)`` rewards.
        dones: ``(T, N)`` 1 where the episode ended after step ``t`` (no bootstrap across it).
        q_taken: ``(T, N)`` ``Q(x_t, a_t)`` of the actions taken.
        values: ``(T, N)`` ``V(x_t) = sum_a pi(a|x_t) Q(x_t, a)``.
        truncated_rhos: ``(T, N)`` importance weights ``min(1, pi(a_t|x_t) / mu(a_t|x_t))``.
        last_values: ``(N,)`` ``V(x_T)`` of the observations after the last step.
        gamma: Discount factor.

    Returns:
        ``(T, N)`` targets ``Q^ret_t``.
    """
    target = ops.convert_to_tensor(last_values)
    targets = []
    for t in reversed(range(rewards.shape[0])):  # T is static: unrolled in the graph
        target = rewards[t] + gamma * (1.0 - dones[t]) * target
        targets.append(target)
        target = truncated_rhos[t] * (target - q_taken[t]) + values[t]
    return ops.stack(targets[::-1])


def standardized(values: Tensor) -> Tensor:
    """``(values - mean) / std``, as PPO and TRPO normalise advantages."""
    return (values - ops.mean(values)) / (ops.std(values) + 1e-8)


def minibatch_epochs(epochs: int, batch_size: int, minibatch_size: int, step: Callable, metrics: dict,
                     seed: keras.random.SeedGenerator) -> dict:
    """In a compiled update: ``epochs`` passes over ``batch_size`` samples in shuffled minibatches (orders drawn
    from ``seed``; ``minibatch_size`` divides ``batch_size``).

    ``step(indices)`` makes one minibatch's update and returns ``(metrics, stop)``; a true ``stop`` ends every pass
    there (PPO's KL early stop). Returns the last metrics (``metrics`` if none ran). One ``while_loop``.
    """
    per_epoch = batch_size // minibatch_size  # minibatches per pass
    assert per_epoch * minibatch_size == batch_size, (batch_size, minibatch_size)
    orders = ops.argsort(keras.random.uniform((epochs, batch_size), seed=seed), axis=1)  # row e: pass e's order

    def body(i, stop, metrics):
        order = ops.take(orders, i // per_epoch, axis=0)
        metrics, stop = step(ops.slice(order, (i % per_epoch * minibatch_size,), (minibatch_size,)))
        return i + 1, stop, metrics

    def more(i, stop, metrics):
        return ops.logical_and(i < epochs * per_epoch, ops.logical_not(stop))

    return backend.while_loop(more, body, (ops.convert_to_tensor(0), ops.convert_to_tensor(False), metrics))[2]

"""Pure TensorFlow maths shared by trust-region agents: flat parameter vectors, conjugate
gradient, the ACER trust-region projection and Retrace targets.

Every function works eagerly and inside a ``tf.function`` (the loops are ``tf.while_loop``s or
unroll over a static length), so agents call them from their graph-mode ``train_step``.
"""
from __future__ import annotations

from typing import Callable, Sequence

from xagents.utils.quiet_tensorflow import tf


def flat_concat(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """Concatenate tensors (e.g. gradients of several variables) into one 1-D vector."""
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def assign_flat(variables: Sequence[tf.Variable], vector: tf.Tensor) -> None:
    """Assign consecutive slices of the 1-D ``vector`` to ``variables``, in order.

    The inverse of ``flat_concat(variables)``: shapes come from the variables.
    """
    start = 0
    for variable in variables:
        size = int(tf.size(variable))
        variable.assign(tf.reshape(vector[start:start + size], variable.shape))
        start += size


def conjugate_gradient(
    matrix_vector_product: Callable[[tf.Tensor], tf.Tensor],
    b: tf.Tensor,
    iterations: int | tf.Tensor,
    residual_tolerance: float | tf.Tensor = 1e-10,
) -> tf.Tensor:
    """Solve ``A x = b`` for a symmetric positive-definite ``A`` given only ``v -> A v``.

    Conjugate gradient (Nocedal & Wright, Numerical Optimization, algorithm 5.2), started at
    ``x = 0``, as TRPO uses it on Fisher-vector products (Schulman et al. 2015, appendix C).
    Runs as a ``tf.while_loop``, so it stays in the graph when called from a ``tf.function``.

    Args:
        matrix_vector_product: ``v -> A v`` for 1-D ``v`` shaped like ``b``.
        b: 1-D right-hand side.
        iterations: At most this many iterations (``A``'s size solves exactly, in exact arithmetic).
        residual_tolerance: Stop once the squared residual norm ``|b - A x|^2`` falls below it.

    Returns:
        The approximate solution ``x``, shaped like ``b``.
    """
    b = tf.convert_to_tensor(b)
    tolerance = tf.cast(residual_tolerance, b.dtype)

    def condition(i, x, r, p, r_dot_r):
        return tf.logical_and(i < iterations, r_dot_r >= tolerance)

    def body(i, x, r, p, r_dot_r):
        z = matrix_vector_product(p)
        alpha = r_dot_r / tf.tensordot(p, z, 1)
        x = x + alpha * p
        r = r - alpha * z
        new_r_dot_r = tf.tensordot(r, r, 1)
        p = r + (new_r_dot_r / r_dot_r) * p
        return i + 1, x, r, p, new_r_dot_r

    _, x, *_ = tf.while_loop(
        condition, body, (tf.constant(0), tf.zeros_like(b), b, b, tf.tensordot(b, b, 1))
    )
    return x


def trust_region_projection(g: tf.Tensor, k: tf.Tensor, delta: float | tf.Tensor) -> tf.Tensor:
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
    k_dot_g = tf.reduce_sum(k * g, axis=-1, keepdims=True)
    k_norm = tf.reduce_sum(k * k, axis=-1, keepdims=True)
    scale = tf.maximum(0.0, (k_dot_g - delta) / tf.maximum(k_norm, 1e-12))
    return g - scale * k


def retrace_targets(
    rewards: tf.Tensor,
    dones: tf.Tensor,
    q_taken: tf.Tensor,
    values: tf.Tensor,
    truncated_rhos: tf.Tensor,
    last_values: tf.Tensor,
    gamma: float | tf.Tensor,
) -> tf.Tensor:
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
    target = tf.convert_to_tensor(last_values)
    targets = []
    for t in reversed(range(rewards.shape[0])):  # T is static: unrolled in the graph
        target = rewards[t] + gamma * (1.0 - dones[t]) * target
        targets.append(target)
        target = truncated_rhos[t] * (target - q_taken[t]) + values[t]
    return tf.stack(targets[::-1])


def standardized(values: tf.Tensor) -> tf.Tensor:
    """``(values - mean) / std``, as PPO and TRPO normalise advantages."""
    return (values - tf.reduce_mean(values)) / (tf.math.reduce_std(values) + 1e-8)


def minibatch_epochs(epochs: int, batch_size: int, minibatch_size: int, step: Callable, metrics: dict) -> dict:
    """In a graph: ``epochs`` passes over ``batch_size`` samples in shuffled minibatches.

    ``step(indices)`` makes one minibatch's update and returns ``(metrics, stop)``; a true ``stop``
    ends every pass there (PPO's KL early stop). Returns the last metrics (``metrics`` if none ran).
    One ``tf.while_loop``, written out: it traces as is, with no autograph conversion.
    """
    per_epoch = -(-batch_size // minibatch_size)  # minibatches per pass (the last one may be short)
    orders = tf.argsort(tf.random.uniform((epochs, batch_size)), axis=1)  # row e: the order of pass e

    def body(i, stop, metrics):
        start = i % per_epoch * minibatch_size
        metrics, stop = step(orders[i // per_epoch, start:start + minibatch_size])
        return i + 1, stop, metrics

    def more(i, stop, metrics):
        return tf.logical_and(i < epochs * per_epoch, tf.logical_not(stop))

    return tf.while_loop(more, body, (tf.constant(0), tf.constant(False), metrics))[2]

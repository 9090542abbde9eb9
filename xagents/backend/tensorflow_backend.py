"""The TensorFlow backend: updates traced into one graph by ``tf.function``, gradients from ``tf.GradientTape``."""
from __future__ import annotations

from typing import Callable, Sequence

import keras

from xagents.utils.quiet_tensorflow import tf


def compiled(fn: Callable, variables: Callable[[], Sequence[keras.Variable]] | None = None,
             jit_compile: bool | None = None, reduce_retracing: bool = False) -> Callable:
    """``fn`` traced into one graph (the variables it uses are captured by the trace); ``reduce_retracing`` traces
    for any batch size once sizes vary."""
    # Traced as written (no autograph): updates hold no tensor-dependent Python control flow.
    return tf.function(fn, autograph=False, jit_compile=jit_compile, reduce_retracing=reduce_retracing)


def value_and_grad(loss: Callable, variables: Sequence[keras.Variable]):
    """``((value, aux), gradients)`` of ``loss() -> (value, aux)`` with respect to ``variables``."""
    with tf.GradientTape() as tape:
        value, aux = loss()
    return (value, aux), tape.gradient(value, list(variables))


def hvp(loss: Callable, variables: Sequence[keras.Variable], vector: tf.Tensor) -> tf.Tensor:
    """Hessian-vector product by double backpropagation: the gradient of ``grad(loss) . vector``."""
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            value = loss()
        gradient = _flat(inner.gradient(value, list(variables)))
        product = tf.reduce_sum(gradient * tf.stop_gradient(vector))
    return _flat(outer.gradient(product, list(variables)))


def vjp(fn: Callable, primal, cotangent):
    """``(fn(primal), cotangent pulled back through fn)``."""
    with tf.GradientTape() as tape:
        tape.watch(primal)
        output = fn(primal)
    return output, tape.gradient(output, primal, output_gradients=cotangent)


def while_loop(cond: Callable, body: Callable, loop_vars: tuple):
    """``tf.while_loop``: a graph's loops may assign variables."""
    return tf.while_loop(cond, body, loop_vars)


def cond(pred, true_fn: Callable, false_fn: Callable):
    """``tf.cond``: a graph's branches may assign variables."""
    return tf.cond(pred, true_fn, false_fn)


def _flat(tensors) -> tf.Tensor:
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], 0)


def gpu_available() -> bool:
    """Whether TensorFlow sees a GPU."""
    return bool(tf.config.list_logical_devices('GPU'))


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's, TensorFlow's and Keras' global random streams (layer initialisers)."""
    keras.utils.set_random_seed(seed)


def limit_threads() -> None:
    """Compute on one thread (a Ray worker, beside others on the same cores)."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow already running in this process (a worker built in the learner's)
        pass

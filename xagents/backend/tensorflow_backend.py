"""The TensorFlow backend: updates traced into one graph by ``tf.function``, gradients from ``tf.GradientTape``."""
from __future__ import annotations

from typing import Callable, Sequence

import keras

from xagents.utils.quiet_tensorflow import tf


def compiled(fn: Callable, variables: Callable[[], Sequence[keras.Variable]] | None = None,
             jit_compile: bool | None = None) -> Callable:
    """``fn`` traced into one graph (the variables it uses are captured by the trace)."""
    return tf.function(fn, autograph=False, jit_compile=jit_compile)  # traced as written: no tensor-dependent Python


def value_and_grad(loss: Callable, variables: Sequence[keras.Variable]):
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
    with tf.GradientTape() as tape:
        tape.watch(primal)
        output = fn(primal)
    return output, tape.gradient(output, primal, output_gradients=cotangent)


def while_loop(cond: Callable, body: Callable, loop_vars: tuple):
    return tf.while_loop(cond, body, loop_vars)


def cond(pred, true_fn: Callable, false_fn: Callable):
    return tf.cond(pred, true_fn, false_fn)


def _flat(tensors) -> tf.Tensor:
    return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], 0)

"""What differs per Keras backend, and nothing else: compiling a stateful update, values and gradients, the
Hessian- and Jacobian-vector products, and control flow that updates variables.

The agents' maths is written once in ``keras.ops``; this package picks the module of the backend Keras runs on
(``KERAS_BACKEND``, read when Keras is first imported: ``tensorflow``, the default, ``jax`` or ``torch``). Every
module offers:

- ``compiled(fn, variables)``: ``fn`` as one compiled call (``tf.function``; ``jax.jit`` with the variables'
  values threaded through it; on PyTorch, an eager call that records no gradients). ``fn`` reads and assigns Keras
  variables as ordinary eager code does.
- ``value_and_grad(loss, variables)``: ``((value, aux), gradients)`` of ``loss() -> (value, aux)``.
- ``hvp(loss, variables, vector)``: the Hessian of ``loss()`` times a flat ``vector``.
- ``vjp(fn, primal, cotangent)``: ``fn(primal)`` and the cotangent pulled back through it.
- ``while_loop(cond, body, loop_vars)`` and ``cond(pred, true_fn, false_fn)``: as ``keras.ops``', where the
  body or branches may assign variables.
- ``gpu_available()``: whether the backend computes on a GPU.
- ``seed_everything(seed)``: seed the global random streams (Python's, NumPy's, Keras' layer initialisers).
- ``limit_threads()``: compute on one thread (Ray workers).
"""
from __future__ import annotations

import sys
from typing import Callable

import xagents.utils.quiet_keras  # noqa: F401 (a backend that cannot load is one line with its pip command)
from xagents.utils.console import BACKENDS

import keras

NAME = keras.backend.backend()
if NAME not in BACKENDS:
    raise ImportError(f'xagents runs on the Keras backends {", ".join(BACKENDS)}; KERAS_BACKEND is {NAME!r}')

if NAME != 'tensorflow' and 'tensorflow' not in sys.modules:
    # Keras asks whether TensorFlow is importable when it serialises a layer's config (cloning a model into a target
    # network) and imports it to answer: 1.5 s of a launch, and TensorFlow's start-up lines, to look for TensorFlow
    # objects that cannot exist before it loads (xagents.utils.console.load_tensorflow asks again once it does).
    from keras.src.utils import module_utils

    module_utils.tensorflow._available = False

if NAME == 'jax':
    from xagents.backend import jax_backend as _module
elif NAME == 'torch':
    from xagents.backend import torch_backend as _module
else:
    from xagents.backend import tensorflow_backend as _module
compiled: Callable = _module.compiled
value_and_grad: Callable = _module.value_and_grad
hvp: Callable = _module.hvp
vjp: Callable = _module.vjp
while_loop: Callable = _module.while_loop
cond: Callable = _module.cond
gpu_available: Callable[[], bool] = _module.gpu_available
seed_everything: Callable[[int], None] = _module.seed_everything
limit_threads: Callable[[], None] = _module.limit_threads


def compiled_method(method: Callable = None, **options) -> Callable:
    """Decorate an agent's method to run as one compiled call per agent, over the variables of
    ``agent.graph_variables()`` (its models', optimizers' and random streams')."""
    if method is None:
        return lambda method: compiled_method(method, **options)
    name = method.__name__

    class Compiled:
        def __get__(self, agent, owner=None):
            if agent is None:
                return method
            bound = compiled(method.__get__(agent, owner), agent.graph_variables, **options)
            agent.__dict__[name] = bound  # later lookups find it on the agent: built once
            return bound

    return Compiled()

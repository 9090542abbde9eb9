"""The PyTorch backend: an update runs eagerly with autograd off, and turns it on only where a gradient is taken
(``torch.autograd.grad`` over the variables' parameters), so acting and target computations record no graph."""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import keras
import numpy as np
import torch

from xagents.backend.seeding import seed_keras_and_numpy


def compiled(fn: Callable, variables: Callable[[], Sequence[keras.Variable]] | None = None,
             jit_compile: bool | None = None, reduce_retracing: bool = False) -> Callable:
    """``fn`` run eagerly without recording gradients, its NumPy arguments as tensors (as ``tf.function`` and
    ``jax.jit`` take them); ``jit_compile`` and ``reduce_retracing`` are TensorFlow's switches."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        args, kwargs = keras.tree.map_structure(_tensor, (args, kwargs))
        with torch.no_grad():
            return fn(*args, **kwargs)

    return call


def _tensor(leaf):
    return keras.ops.convert_to_tensor(leaf) if isinstance(leaf, (np.ndarray, np.generic)) else leaf


def _parameters(variables: Sequence[keras.Variable]) -> list[torch.Tensor]:
    return [variable.value for variable in variables]


def _detached(structure):
    return keras.tree.map_structure(lambda leaf: leaf.detach() if isinstance(leaf, torch.Tensor) else leaf,
                                    structure)


def _gradients(value: torch.Tensor, parameters: list[torch.Tensor], **options) -> list[torch.Tensor]:
    gradients = torch.autograd.grad(value, parameters, allow_unused=True, **options)
    return [torch.zeros_like(parameter) if gradient is None else gradient
            for parameter, gradient in zip(parameters, gradients)]


def value_and_grad(loss: Callable, variables: Sequence[keras.Variable]):
    """``((value, aux), gradients)`` of ``loss() -> (value, aux)`` with respect to ``variables`` (a variable the
    loss does not use gets zeros, as TensorFlow's and JAX's do)."""
    with torch.enable_grad():
        value, aux = loss()
        gradients = _gradients(value, _parameters(variables))
    return (value.detach(), _detached(aux)), gradients


def hvp(loss: Callable, variables: Sequence[keras.Variable], vector: torch.Tensor) -> torch.Tensor:
    """Hessian-vector product by double backpropagation: the gradient of ``grad(loss) . vector``."""
    parameters = _parameters(variables)
    with torch.enable_grad():
        gradient = _flat(_gradients(loss(), parameters, create_graph=True))
        product = torch.sum(gradient * vector.detach())
        return _flat(_gradients(product, parameters))


def vjp(fn: Callable, primal, cotangent):
    """``(fn(primal), cotangent pulled back through fn)``."""
    primal = primal.detach().requires_grad_(True)
    with torch.enable_grad():
        output = fn(primal)
        (pulled,) = torch.autograd.grad(output, primal, grad_outputs=cotangent)
    return output.detach(), pulled


def while_loop(cond: Callable, body: Callable, loop_vars: tuple):
    """A Python loop, assigning as it goes (PyTorch runs eagerly)."""
    loop_vars = tuple(loop_vars)
    while bool(cond(*loop_vars)):
        loop_vars = tuple(body(*loop_vars))
    return loop_vars


def cond(pred, true_fn: Callable, false_fn: Callable):
    """A Python branch (PyTorch runs eagerly)."""
    return true_fn() if bool(pred) else false_fn()


def _flat(tensors) -> torch.Tensor:
    return torch.cat([torch.reshape(tensor, [-1]) for tensor in tensors])


def gpu_available() -> bool:
    """Whether Keras computes on a CUDA device (it does whenever PyTorch sees one)."""
    return torch.cuda.is_available()


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's, PyTorch's and Keras' global random streams (layer initialisers)."""
    seed_keras_and_numpy(seed)
    torch.manual_seed(seed)


def limit_threads() -> None:
    """Compute on one thread (a Ray worker, beside others on the same cores)."""
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # PyTorch has already run parallel work in this process
        pass

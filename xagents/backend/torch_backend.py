"""The PyTorch backend: an update runs eagerly with autograd off, and turns it on only where a gradient is taken
(``torch.autograd.grad`` over the variables' parameters), so acting and target computations record no graph."""
from __future__ import annotations

import functools
import logging
import sys
from typing import Callable, Sequence

import keras
import numpy as np
import torch

from xagents.backend.seeding import seed_keras_and_numpy

LOGGER = logging.getLogger(__name__)


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


def imported_before_keras() -> bool:
    """Whether PyTorch was imported before Keras (``sys.modules`` keeps the order modules start loading in), and so
    before xagents set ``OMP_WAIT_POLICY=PASSIVE`` for it, with the process started without that variable: then
    PyTorch's OpenMP threads spin while they wait for work (the policy is read once, when PyTorch loads)."""
    first = {}
    for index, module in enumerate(sys.modules):  # Keras re-inserts its top modules: the first of each package counts
        first.setdefault(module.partition('.')[0], index)
    if first.get('torch', 0) > first.get('keras', 0):
        return False
    try:
        with open('/proc/self/environ', 'rb') as file:  # what the process started with, not what Python set since
            started = file.read().split(b'\0')
    except OSError:  # not Linux: how the process started is unknown, so PyTorch is left as it is
        return False
    return not any(entry.startswith(b'OMP_WAIT_POLICY=') for entry in started)


def stop_spinning_threads() -> None:
    """Compute on one thread where PyTorch's OpenMP threads spin (:func:`imported_before_keras`): beside other work
    on the same cores, the own-network guide's 20k-step PPO fit took 59 s for 5k steps with two spinning threads, and
    4.6 s on one, as with two passive ones. Said in one line, with what keeps every thread."""
    threads = torch.get_num_threads()
    if threads > 1 and imported_before_keras():
        torch.set_num_threads(1)
        LOGGER.warning('PyTorch was imported before xagents, too early for OMP_WAIT_POLICY=PASSIVE, and its idle '
                       'threads would spin: computing on 1 thread of %d (import xagents first, or set '
                       'OMP_WAIT_POLICY=PASSIVE before starting Python, to use them all)', threads)


stop_spinning_threads()

"""The JAX backend: an update is one ``jax.jit`` call, and the Keras variables it reads or assigns are threaded
through it as values.

Inside the compiled call every tracked variable lives in a ``keras.StatelessScope`` (a *frame*): the update's code
reads and assigns variables as usual, and the frame collects their new values, which are written back once the
call returns. Control flow whose body assigns variables (a loop of optimizer steps) and differentiation open an
inner frame over the same variables, so their values enter and leave JAX's transformations as arguments and
results, never as leaked tracers.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import keras
import numpy as np

from xagents.backend.seeding import seed_keras_and_numpy

_frames: list['_Frame'] = []  # the open frames, innermost last

# Compiled updates are kept on disk (JAX's persistent compilation cache), so a second run of the same agent on the
# same env skips most of its compile time; JAX_COMPILATION_CACHE_DIR chooses another folder.
if not jax.config.jax_compilation_cache_dir:
    jax.config.update('jax_compilation_cache_dir', os.path.join(
        os.environ.get('XDG_CACHE_HOME', os.path.expanduser('~/.cache')), 'xagents', 'jax'))
# Every compilation is kept, the small ones of building an agent eagerly (initialisers, a first call of each model)
# included: together they are most of a launch (about 1.5 s of it here), each under JAX's 1 s default threshold.
if 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS' not in os.environ:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)


class _Frame:
    """Tracked variables and the scope holding their current values."""

    def __init__(self, variables: Sequence[keras.Variable], values: Sequence) -> None:
        self.variables = list(variables)
        self.scope = keras.StatelessScope(state_mapping=list(zip(self.variables, values)))
        if _frames:  # variables tracked further out keep the values they have there
            self.scope.state_mapping = {**_frames[-1].scope.state_mapping, **self.scope.state_mapping}
        self.initial = dict(self.scope.state_mapping)

    def values(self) -> list:
        return [self.scope.get_current_value(variable) for variable in self.variables]

    def changed(self) -> dict[int, jax.Array]:
        """The tracked variables assigned in this frame, by position."""
        return {i: self.scope.state_mapping[id(variable)] for i, variable in enumerate(self.variables)
                if self.scope.state_mapping[id(variable)] is not self.initial[id(variable)]}


@contextlib.contextmanager
def _framed(variables: Sequence[keras.Variable], values: Sequence):
    frame = _Frame(variables, values)
    _frames.append(frame)
    try:
        with frame.scope:
            yield frame
    finally:
        _frames.pop()


def _tracked() -> list[keras.Variable]:
    return _frames[-1].variables if _frames else []


def _update(variables: Sequence[keras.Variable], values: Sequence) -> None:
    for variable, value in zip(variables, values):
        variable.assign(value)  # into the enclosing frame, or the variable itself outside any


def _read(variable: keras.Variable):
    """A variable's value outside any frame (in one: from the frame)."""
    return variable.value if _frames else variable._value  # (the stored array: no autocast, no scope lookup)


def _write(variable: keras.Variable, value) -> None:
    """Store what a compiled call computed: already an array of the variable's shape and dtype, so Keras' checks
    and conversions (a third of a small update's time, for ~40 variables) are skipped."""
    if _frames:
        variable.assign(value)
    else:
        variable._direct_assign(value)


def _unique(variables) -> list[keras.Variable]:
    return list({id(variable): variable for variable in variables}.values())


def _dynamic(leaf) -> bool:
    """Whether a call argument is traced (arrays) rather than part of the compiled function's identity (Python
    numbers, flags, None)."""
    return isinstance(leaf, (np.ndarray, np.generic, jax.Array))


def compiled(fn: Callable, variables: Callable[[], Sequence[keras.Variable]] | None = None,
             jit_compile: bool | None = None, reduce_retracing: bool = False) -> Callable:
    """``fn`` as one ``jax.jit`` call over the values of ``variables()``; arguments that are not arrays are static
    (a new value compiles anew), and each new shape compiles once. ``jit_compile`` and ``reduce_retracing`` are
    TensorFlow's switches: JAX always compiles with XLA."""
    compiled_by_signature = {}

    def call(*args, **kwargs):
        tracked = _unique(variables() if variables else ())
        leaves, structure = jax.tree_util.tree_flatten((args, kwargs), is_leaf=lambda leaf: leaf is None)
        slots = tuple(_dynamic(leaf) for leaf in leaves)
        static = tuple(None if slot else leaf for leaf, slot in zip(leaves, slots))
        key = (tuple(map(id, tracked)), structure, slots, static)
        if key not in compiled_by_signature:
            def pure(values, dynamic):
                given = iter(dynamic)
                args, kwargs = jax.tree_util.tree_unflatten(
                    structure, [next(given) if slot else leaf for leaf, slot in zip(static, slots)])
                with _framed(tracked, values) as frame:
                    output = fn(*args, **kwargs)
                return output, frame.changed()

            compiled_by_signature[key] = jax.jit(pure)
        output, changed = compiled_by_signature[key]([_read(variable) for variable in tracked],
                                                     [leaf for leaf, slot in zip(leaves, slots) if slot])
        for i, value in changed.items():
            _write(tracked[i], value)
        return output

    return call


def value_and_grad(loss: Callable, variables: Sequence[keras.Variable]):
    """Gradients with respect to ``variables``; what ``loss`` assigns to other tracked variables (a random
    stream's state) is kept."""
    variables = list(variables)
    targets = {id(variable) for variable in variables}
    others = [variable for variable in _tracked() if id(variable) not in targets]

    def pure(values, other_values):
        with _framed(variables + others, list(values) + list(other_values)) as frame:
            value, aux = loss()
        return value, (aux, frame.values()[len(variables):])

    (value, (aux, other_values)), gradients = jax.value_and_grad(pure, has_aux=True)(
        [variable.value for variable in variables], [variable.value for variable in others])
    _update(others, other_values)
    return (value, aux), gradients


def hvp(loss: Callable, variables: Sequence[keras.Variable], vector: jax.Array) -> jax.Array:
    """Hessian-vector product, forward over reverse: ``jvp`` of ``grad(loss)`` along ``vector``."""
    variables = list(variables)

    def gradient(values):
        def value(values):
            with _framed(variables, values):
                return loss()
        return jax.grad(value)(values)

    values = [variable.value for variable in variables]
    tangents, start = [], 0
    for value in values:
        tangents.append(jnp.reshape(vector[start:start + value.size], value.shape).astype(value.dtype))
        start += value.size
    _, product = jax.jvp(gradient, (values,), (tangents,))
    return jnp.concatenate([jnp.ravel(part) for part in product])


def vjp(fn: Callable, primal, cotangent):
    """``(fn(primal), cotangent pulled back through fn)``: ACER's gradient of its gain in the policy's statistics."""
    output, pullback = jax.vjp(fn, primal)
    return output, pullback(cotangent)[0]


def while_loop(cond: Callable, body: Callable, loop_vars: tuple):
    """``keras.ops.while_loop`` whose ``body`` may assign tracked variables (a minibatch's optimizer step): their
    values travel in the loop's carry."""
    if not _frames:  # eager (outside a compiled call): a Python loop, assigning as it goes
        loop_vars = tuple(loop_vars)
        while bool(cond(*loop_vars)):
            loop_vars = tuple(body(*loop_vars))
        return loop_vars
    tracked = _tracked()

    def condition(carry):
        values, loop_vars = carry
        with _framed(tracked, values):
            return cond(*loop_vars)

    def step(carry):
        values, loop_vars = carry
        with _framed(tracked, values) as frame:
            loop_vars = tuple(body(*loop_vars))
        return frame.values(), loop_vars

    values, loop_vars = jax.lax.while_loop(condition, step, ([variable.value for variable in tracked],
                                                             tuple(loop_vars)))
    _update(tracked, values)
    return loop_vars


def cond(pred, true_fn: Callable, false_fn: Callable):
    """``keras.ops.cond`` whose branches may assign tracked variables (a delayed actor step, a target update)."""
    if not _frames:
        return true_fn() if bool(pred) else false_fn()
    tracked = _tracked()

    def branch(fn):
        def run(values):
            with _framed(tracked, values) as frame:
                output = fn()
            return frame.values(), output
        return run

    values, output = jax.lax.cond(pred, branch(true_fn), branch(false_fn), [variable.value for variable in tracked])
    _update(tracked, values)
    return output


def gpu_available() -> bool:
    """Whether JAX computes on a GPU."""
    return any(device.platform == 'gpu' for device in jax.devices())


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and Keras' global random streams (layer initialisers)."""
    seed_keras_and_numpy(seed)


def limit_threads() -> None:
    """Compute on one thread (a Ray worker, beside others on the same cores), set before the process first computes
    (as a worker has not, when it builds its agent). ``PJRT_NPROC=1`` sizes XLA's CPU thread pool: without it jaxlib
    0.10 spreads a matrix product over every core, ``--xla_cpu_multi_thread_eigen=false`` (kept for Eigen's own
    threads) or not. XLA has no ``--intra_op_parallelism_threads``, and it aborts on a flag it does not know."""
    os.environ.setdefault('PJRT_NPROC', '1')
    flags = os.environ.get('XLA_FLAGS', '')
    if 'xla_cpu_multi_thread_eigen' not in flags:
        os.environ['XLA_FLAGS'] = f'{flags} --xla_cpu_multi_thread_eigen=false'.strip()

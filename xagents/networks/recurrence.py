"""Memory for policies that need it (partial observability): an LSTM or GRU layer whose state resets where an
episode starts, its NumPy mirror for acting, and :class:`Memory`, the state of a batch of envs between steps.

A recurrent model takes three inputs: observations ``(B * T, ...)`` (``T`` steps of ``B`` envs, env-major), the
episode starts ``(B, T)`` (1 where a step begins an episode: the state is zeroed before it, as sb3-contrib's
``RecurrentPPO`` and CleanRL's ``ppo_atari_lstm`` do) and the state ``(B, S)`` before the first step; it gives
its usual outputs for every step and, last, the state after the last step. Acting is ``T = 1``; training replays
whole sequences from the states stored when they were collected, so the first epoch's log-probabilities are
those of collection.
"""
from __future__ import annotations

import dataclasses

import keras
import numpy as np
from keras import ops

KINDS = ('lstm', 'gru')
GATES = {'lstm': 4, 'gru': 3}


def state_size(kind: str, units: int) -> int:
    """Floats of state one layer carries: ``[h, c]`` for an LSTM, ``h`` for a GRU."""
    return 2 * units if kind == 'lstm' else units


def check_kind(kind: str | None) -> None:
    """Refuse a recurrent kind that is neither ``lstm`` nor ``gru`` (None: no recurrence)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f'expected recurrent {" or ".join(map(repr, KINDS))} (or None), got {kind!r}')


class Recurrent(keras.layers.Layer):
    """An LSTM or GRU over ``T`` steps of ``B`` envs whose state is zeroed before every step that starts an episode.

    Keras' gates and initialisation (LSTM gates input, forget, cell, output with a forget bias of 1; GRU with the
    reset gate after the recurrent product, as cuDNN and PyTorch), computed here so that the input projection of
    all steps is one product before the loop over time and the NumPy mirror (:func:`numpy_step`) is exact.

    Call with ``(x, starts, state)``: ``x`` ``(B * T, F)`` env-major, ``starts`` ``(B, T)``, ``state`` ``(B, S)``;
    returns the outputs ``(B * T, units)`` and the state after the last step ``(B, S)``.
    """

    def __init__(self, kind: str, units: int, **kwargs) -> None:
        super().__init__(**kwargs)
        check_kind(kind)
        self.kind, self.units = kind, units
        self.state_size = state_size(kind, units)
        self.state_offset = 0  # where this layer's state starts in the model's state vector (set by the builder)

    def build(self, input_shape) -> None:
        features, gates = int(input_shape[-1]), GATES[self.kind] * self.units
        self.kernel = self.add_weight(shape=(features, gates), initializer='glorot_uniform', name='kernel')
        self.recurrent_kernel = self.add_weight(shape=(self.units, gates), initializer='orthogonal',
                                                name='recurrent_kernel')
        if self.kind == 'lstm':
            forget = np.zeros(gates, np.float32)
            forget[self.units:2 * self.units] = 1.0
            self.bias = self.add_weight(shape=(gates,), initializer=keras.initializers.Constant(forget), name='bias')
        else:  # input and recurrent biases
            self.bias = self.add_weight(shape=(2, gates), initializer='zeros', name='bias')

    def compute_output_spec(self, x, starts, state):
        return (keras.KerasTensor((x.shape[0], self.units), 'float32'),
                keras.KerasTensor((state.shape[0], self.state_size), 'float32'))

    def call(self, x, starts, state):
        batch, steps = ops.shape(starts)[0], ops.shape(starts)[1]
        input_bias = self.bias if self.kind == 'lstm' else self.bias[0]
        projected = ops.reshape(ops.matmul(x, self.kernel) + input_bias, (batch, steps, -1))
        keep = 1.0 - ops.cast(starts, 'float32')
        if starts.shape[1] == 1:  # one step (acting, exports): no loop, which TFLite could not convert
            state = self.cell(projected[:, 0], state * keep)
            return state[:, :self.units], state

        def step(previous, inputs):
            projected_t, keep_t = inputs
            state = self.cell(projected_t, previous * keep_t[:, None])
            return state, state

        _, states = ops.scan(step, ops.cast(state, 'float32'),
                             (ops.transpose(projected, (1, 0, 2)), ops.transpose(keep)))  # (T, B, S)
        outputs = ops.transpose(states[:, :, :self.units], (1, 0, 2))
        return ops.reshape(outputs, (-1, self.units)), states[-1]

    def cell(self, projected, state):
        """One step: the new state from this step's input projection and the (reset) previous state."""
        units = self.units
        if self.kind == 'lstm':
            h, c = state[:, :units], state[:, units:]
            z = projected + ops.matmul(h, self.recurrent_kernel)
            i, f, g, o = ops.split(z, 4, axis=-1)
            c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
            return ops.concatenate([ops.sigmoid(o) * ops.tanh(c), c], -1)
        recurrent = ops.matmul(state, self.recurrent_kernel) + self.bias[1]
        x_z, x_r, x_h = ops.split(projected, 3, axis=-1)
        h_z, h_r, h_h = ops.split(recurrent, 3, axis=-1)
        z, r = ops.sigmoid(x_z + h_z), ops.sigmoid(x_r + h_r)
        return z * state + (1 - z) * ops.tanh(x_h + r * h_h)

    def get_config(self) -> dict:
        return {**super().get_config(), 'kind': self.kind, 'units': self.units}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def numpy_step(kind: str, weights: tuple[np.ndarray, ...], x: np.ndarray, state: np.ndarray) -> np.ndarray:
    """:meth:`Recurrent.cell` on the input ``x`` ``(B, F)`` of one step, in NumPy, from copies of the layer's
    ``(kernel, recurrent_kernel, bias)``; ``state`` is already reset where an episode starts."""
    kernel, recurrent_kernel, bias = weights
    units = recurrent_kernel.shape[0]
    if kind == 'lstm':
        h, c = state[:, :units], state[:, units:]
        i, f, g, o = np.split(x @ kernel + bias + h @ recurrent_kernel, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return np.concatenate([_sigmoid(o) * np.tanh(c), c], -1)
    x_z, x_r, x_h = np.split(x @ kernel + bias[0], 3, axis=-1)
    h_z, h_r, h_h = np.split(state @ recurrent_kernel + bias[1], 3, axis=-1)
    z, r = _sigmoid(x_z + h_z), _sigmoid(x_r + h_r)
    return z * state + (1 - z) * np.tanh(x_h + r * h_h)


def in_sequences(length: int, *arrays: np.ndarray) -> list[np.ndarray]:
    """``(T, E, ...)`` rollout arrays as ``(E * T / length, length, ...)`` sequences: each env's steps in order, cut
    every ``length`` steps (sequence ``e * T / length + k`` is env ``e``'s ``k``-th)."""
    return [np.swapaxes(array, 0, 1).reshape(-1, length, *array.shape[2:]) for array in arrays]


def given_memory(memory: Memory | None, state, episode_start, single: bool, owner: str) -> Memory | None:
    """``predict``'s ``state`` and ``episode_start`` put into ``memory``, the fresh memory of its batch (None for an
    agent without memory, ``owner``, which then refuses them)."""
    if memory is None:
        if state is not None or episode_start is not None:
            raise ValueError(f'{owner} has no memory: state and episode_start are for recurrent policies '
                             "(recurrent='lstm' or 'gru')")
        return None
    batch, size = memory.state.shape
    if state is not None:
        state = np.asarray(state, np.float32)
        if state.shape != ((size,) if single else (batch, size)):
            expected = f'({size},)' if single else f'({batch}, {size})'
            raise ValueError(f'expected a state shaped {expected}, as predict returned it, got shape {state.shape}')
        memory.state, memory.starts[:] = state.reshape(batch, size).copy(), False
    if episode_start is not None:
        starts = np.asarray(episode_start, bool).reshape(-1)
        if starts.shape not in ((1,), (batch,)):
            raise ValueError(f'expected episode_start as one boolean or {batch}, got shape {np.shape(episode_start)}')
        memory.starts = np.broadcast_to(starts, (batch,)).copy()
    return memory


def memory_kwargs(memory: Memory | None) -> dict:
    """``act``'s keyword for ``memory``: none for agents without recurrence, whose ``act`` takes no memory."""
    return {} if memory is None else {'memory': memory}


@dataclasses.dataclass
class Memory:
    """The recurrent state of a batch of envs between steps.

    Attributes:
        state: ``(B, S)`` the state before the next step.
        starts: ``(B,)`` booleans: the env's next step begins an episode (its state is zeroed then).
        next_state: ``(B, S)`` the state after the step the policy last acted on (taken by :meth:`advance`).
    """

    state: np.ndarray
    starts: np.ndarray
    next_state: np.ndarray | None = None

    @classmethod
    def zeros(cls, batch: int, size: int) -> Memory:
        """A batch of envs about to begin their episodes."""
        return cls(np.zeros((batch, size), np.float32), np.ones(batch, bool))

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts (B, 1), state (B, S))``, as a model takes them for one step."""
        return self.starts.astype(np.float32)[:, None], self.state

    def advance(self, dones: np.ndarray) -> None:
        """After an env step: carry the state on; envs whose episode ended begin anew at their next step."""
        self.state, self.next_state = self.next_state, None
        self.starts = np.asarray(dones, bool).copy()

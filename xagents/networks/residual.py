"""SimBa's residual block (Lee et al. 2024, https://arxiv.org/abs/2410.09754): pre-normalisation, an inverted-bottleneck
MLP, and a skip connection, so that deeper and wider networks keep a simple function at initialisation; and how agents
built with ``simba`` train their SimBa networks."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import keras

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent

from xagents.networks.batch_renorm import BatchRenorm


class ResidualBlock(keras.layers.Layer):
    """``x + W2 act(W1 norm(x) + b1) + b2`` with ``W1`` of ``units * expansion`` outputs and ``W2`` back to ``units``
    (He-normal initialised, as SimBa's and SBX's); ``norm`` is layer normalisation, or batch renormalisation in
    CrossQ (then ``batch_renorm`` holds its settings). The input must have ``units`` features."""

    def __init__(self, units: int, expansion: int = 4, activation: str = 'relu', norm: str = 'layernorm',
                 batch_renorm: dict | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units, self.expansion, self.activation, self.norm = units, expansion, activation, norm
        self.batch_renorm = batch_renorm
        self.normalise = (BatchRenorm(**(batch_renorm or {}), dtype=self.dtype_policy) if norm == 'batchrenorm'
                          else keras.layers.LayerNormalization(epsilon=1e-6, dtype=self.dtype_policy))
        self.expand = keras.layers.Dense(units * expansion, activation=activation, kernel_initializer='he_normal',
                                         dtype=self.dtype_policy)
        self.project = keras.layers.Dense(units, kernel_initializer='he_normal', dtype=self.dtype_policy)

    def build(self, input_shape) -> None:
        if int(input_shape[-1]) != self.units:
            raise ValueError(f'a residual block of {self.units} units takes {self.units} features, got '
                             f'{int(input_shape[-1])}: put a [dense-N] of units={self.units} before it')
        self.normalise.build(input_shape)
        self.expand.build(input_shape)
        self.project.build((*input_shape[:-1], self.units * self.expansion))

    def call(self, x, training: bool = False):
        normalised = self.normalise(x, training=training) if self.norm == 'batchrenorm' else self.normalise(x)
        return x + self.project(self.expand(normalised))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), 'units': self.units, 'expansion': self.expansion,
                'activation': self.activation, 'norm': self.norm, 'batch_renorm': self.batch_renorm}


# SBX's SimBa policies (SimbaSACPolicy, SimbaTQCPolicy, SimbaCrossQPolicy) train the actor and the critics with
# optax.adamw at its default decoupled weight decay, on every weight (biases and layer norms too); the entropy
# coefficient keeps Adam. Keras' AdamW decays the same way: each step, weight -= learning_rate x 1e-4 x weight.
SIMBA_WEIGHT_DECAY = 1e-4
# SimBa's running-statistics normalisation (RSNorm; SonyResearch/simba's ObservationNormalizer) does not clip.
SIMBA_OBSERVATION_CLIP = math.inf


def simba_settings(simba: bool, observation_clip: float) -> tuple[str, float]:
    """The packaged networks' variant (``'-simba'`` or ``''``) and the clip of normalised observations: none for
    SimBa, ``observation_clip`` (the agent's) otherwise."""
    return ('-simba', SIMBA_OBSERVATION_CLIP) if simba else ('', observation_clip)


def default_optimizer(agent: BaseAgent, role: str, overrides: dict) -> keras.optimizers.Optimizer:
    """The optimizer of ``role``'s model where the agent gives none: Adam with its ``optimizer_settings`` and
    ``overrides``, or for a SimBa network (an agent built with ``simba``; a model with residual blocks) AdamW with
    :data:`SIMBA_WEIGHT_DECAY`, as SBX's SimBa policies; Adam and AdamW keep the same state, so saves load across."""
    settings = {**agent.optimizer_settings, **overrides}
    if agent.network_variant == '-simba' and any(isinstance(layer, ResidualBlock)
                                                 for layer in agent.models[role]._flatten_layers()):
        return keras.optimizers.AdamW(weight_decay=SIMBA_WEIGHT_DECAY, **settings)
    return keras.optimizers.Adam(**settings)

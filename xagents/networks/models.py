"""Keras models from INI-style ``.cfg`` files, and a NumPy mirror for acting with small MLPs.

A cfg lists layers in order, one section each: ``[dense-N]``, ``[convolutional-N]``,
``[flatten-N]``, ``[batchrenorm-N]`` (CrossQ's batch renormalisation), ``[residual-N]`` and ``[layernorm-N]`` (SimBa's
residual blocks and final normalisation). Hidden layers with ``common=1`` form a trunk shared by every output; the other
hidden layers form a tower that is built once per output (separate actor and critic networks
in one file); sections with ``output=1`` are the heads, matched in order to the outputs the agent
asks for, with ``units`` filled in from the environment when left out.

On Dict observations every key is encoded apart and the encodings are concatenated before those layers (as
Stable-Baselines3's ``CombinedExtractor``): the hidden sections with ``input=KEY`` are that key's encoder, in
file order, before every other hidden section; a key without any gets the default of its space
(:func:`default_encoder`).

Calling a ``tf.function`` costs ~0.7 ms here whatever the graph, while a 64-64 MLP forward in
NumPy takes ~0.02 ms, so agents act through :class:`NumpyForward` when the model allows it.
"""
from __future__ import annotations

import contextlib

import configparser
import dataclasses
import math
import os
import re
from typing import Callable, Sequence

import numpy as np
import xagents.utils.quiet_keras  # noqa: F401  (first: Keras loads quietly)
import keras

from xagents import backend
from xagents.utils.memory import check_fits
from xagents.envs.observations import DictObservations, Key, is_pixels
from xagents.networks.batch_renorm import BatchRenorm
from xagents.networks.recurrence import GATES, Recurrent, numpy_step, state_size
from xagents.networks.residual import ResidualBlock

LAYER_KEYS = {
    'dense': {'units', 'activation', 'initializer', 'gain', 'common', 'output', 'input'},
    'convolutional': {'filters', 'size', 'stride', 'activation', 'initializer', 'gain', 'common', 'input'},
    'flatten': {'common', 'input'},
    'rescaling': {'scale', 'common', 'input'},
    'recurrent': {'units', 'common'},
    'batchrenorm': {'common'},
    'residual': {'units', 'expansion', 'activation', 'norm', 'common'},
    'layernorm': {'common'},
}
NORMS = ('layernorm', 'batchrenorm')  # what a residual block normalises with
INITIALIZERS = {
    'orthogonal', 'glorot_uniform', 'glorot_normal', 'he_uniform', 'he_normal',
    'lecun_uniform', 'lecun_normal', 'zeros', 'random_normal', 'random_uniform',
}
NUMPY_ACTIVATIONS: dict[str | None, Callable[[np.ndarray], np.ndarray]] = {
    None: lambda x: x,
    'linear': lambda x: x,
    'relu': lambda x: np.maximum(x, 0),
    'tanh': np.tanh,
    'sigmoid': lambda x: 1 / (1 + np.exp(-x)),
    'elu': lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    'softplus': lambda x: np.logaddexp(x, 0),
}
KERAS_ACTIVATIONS = set(NUMPY_ACTIVATIONS) - {None} | {'gelu', 'selu', 'swish', 'leaky_relu'}


@dataclasses.dataclass(frozen=True)
class Output:
    """One output an agent asks of a model: its name, width and activation."""

    name: str
    units: int
    activation: str | None = None


@dataclasses.dataclass
class LayerGraph:
    """How a cfg model's layers connect: a shared trunk, then one chain of layers per output."""

    trunk: list
    branches: list[list]
    features: bool = False  # the model also outputs what its first head takes (gSDE's features)
    flatten_input: bool = False  # non-image observations of rank > 1 enter dense layers flattened
    input_scale: np.ndarray | float | None = None  # what the inputs are multiplied by as they enter (per entry of
    # packed Dict observations whose encoders only scale; 1 / 255 for pictures), None for nothing
    state_size: int = 0  # floats of recurrent state the model carries (0: none)

    def of(self, copy: keras.Model) -> LayerGraph:
        """This graph with the layers of ``copy``, a clone of its model (layers are matched by name)."""
        layers = {layer.name: layer for layer in copy.layers}
        return dataclasses.replace(self, trunk=[layers[layer.name] for layer in self.trunk],
                                   branches=[[layers[layer.name] for layer in branch] for branch in self.branches])


class _MemoryInputs:
    """The episode-start and state inputs of a recurrent model, and the state each recurrent layer gives back."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.starts = keras.Input((None,), name='episode_starts')
        self.state = keras.Input((size,), name='state')
        self.states: list = []
        self.offset = 0

    def apply(self, layer, x):
        """``layer`` on ``x``: a recurrent one takes its slice of the state and gives back its next state."""
        if not isinstance(layer, Recurrent):
            return layer(x)
        layer.state_offset, self.offset = self.offset, self.offset + layer.state_size
        state = self.state if layer.state_size == self.size else self.state[:, layer.state_offset:self.offset]
        x, next_state = layer(x, self.starts, state)
        self.states.append(next_state)
        return x

    def next_state(self):
        return self.states[0] if len(self.states) == 1 else keras.layers.Concatenate()(self.states)


def _memory_inputs(path: str, hidden: list, recurrent: str | None, outputs: int) -> _MemoryInputs | None:
    """The memory inputs of a cfg whose hidden layers include its one ``[recurrent-N]`` section (shared with
    ``common=1``, else built once per output), or None; a CfgError where the cfg and ``recurrent`` disagree."""
    sections = [section for section in hidden if section.name.startswith('recurrent')]
    if not sections:
        if recurrent:
            raise CfgError(f'{path}: recurrent={recurrent!r} needs a [recurrent-N] section (its units) among the '
                           'hidden layers, e.g. ann-model-recurrent.cfg')
        return None
    if recurrent is None:
        raise sections[0].error(None, "a recurrent layer needs recurrent='lstm' or 'gru' (--recurrent)")
    if len(sections) > 1:
        raise sections[1].error(None, f'one recurrent layer per model, got [{sections[0].name}] already')
    units = sections[0].get('units', int, required=True)
    return _MemoryInputs(state_size(recurrent, units) * (1 if sections[0].flag('common') else outputs))


def is_image_space(space) -> bool:
    """Whether a Box holds pictures (what gets the CNN defaults, enters scaled to [0, 1] and is never normalised):
    uint8 in [0, 255], height x width x channels, as Stable-Baselines3's ``is_image_space``, and at least 36 pixels
    high and wide (see :func:`~xagents.envs.observations.is_pixels`). Other observations of rank > 1 (a stack of
    vectors, a small grid of ids) are flattened for dense layers with their values as they are."""
    return is_pixels(space)


class CfgError(ValueError):
    """A ``.cfg`` file that cannot describe a model for this agent and environment."""


class _Section:
    """A parsed cfg section with typed accessors whose errors name file, section and key."""

    def __init__(self, path: str, name: str, items: dict[str, str]) -> None:
        self.path, self.name, self.items = path, name, items

    def error(self, key: str | None, message: str) -> CfgError:
        where = f'[{self.name}]' + (f' {key}' if key else '')
        return CfgError(f'{self.path}: {where}: {message}')

    def get(self, key: str, cast: type, default=None, required: bool = False):
        if key not in self.items:
            if required:
                raise self.error(key, 'missing required key')
            return default
        raw = self.items[key]
        try:
            value = cast(raw)
        except ValueError:
            raise self.error(key, f'expected {cast.__name__}, got {raw!r}') from None
        if cast in (int, float) and not (math.isfinite(value) and value > 0) and key not in ('common', 'output'):
            raise self.error(key, f'expected a positive number, got {raw!r}')
        return value

    def flag(self, key: str) -> bool:
        value = self.items.get(key, '0').strip().lower()
        if value not in ('0', '1', 'true', 'false'):
            raise self.error(key, f'expected 0 or 1, got {value!r}')
        return value in ('1', 'true')


def read_cfg(path: str) -> list[_Section]:
    """Parse and validate a cfg file into sections, raising CfgError naming file, section, key."""
    if not os.path.isfile(path):
        raise CfgError(f'model file not found: {path}')
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error as error:
        raise CfgError(f'{path}: malformed cfg: {error.message.splitlines()[0]}') from None
    sections = []
    for name in parser.sections():
        match = re.fullmatch(r'(dense|convolutional|flatten|rescaling|recurrent|batchrenorm|residual|layernorm)-\d+',
                             name)
        if not match:
            raise CfgError(f'{path}: [{name}]: unknown section, expected dense-N, convolutional-N, flatten-N, '
                           'rescaling-N, recurrent-N, batchrenorm-N, residual-N or layernorm-N')
        section = _Section(path, name, dict(parser[name]))
        unknown = set(section.items) - LAYER_KEYS[match.group(1)]
        if unknown:
            allowed = ' '.join(sorted(LAYER_KEYS[match.group(1)]))
            raise section.error(sorted(unknown)[0], f'unknown key, expected one of: {allowed}')
        activation = section.items.get('activation')
        if activation is not None and activation not in KERAS_ACTIVATIONS:
            raise section.error('activation', f'unknown activation {activation!r}')
        norm = section.items.get('norm')
        if norm is not None and norm not in NORMS:
            raise section.error('norm', f'expected one of: {" ".join(NORMS)}, got {norm!r}')
        initializer = section.items.get('initializer')
        if initializer is not None and initializer not in INITIALIZERS:
            raise section.error('initializer', f'unknown initializer {initializer!r}')
        sections.append(section)
    if not sections:
        raise CfgError(f'{path}: no layers found')
    return sections


def _initializer(section: _Section):
    name = section.items.get('initializer', 'glorot_uniform')
    gain = section.get('gain', float, 1.0)
    if name == 'orthogonal':
        return keras.initializers.Orthogonal(gain=gain)
    if 'gain' in section.items:
        # Scale a variance-scaling initializer by gain**2 (gain multiplies the standard deviation).
        config = keras.initializers.get(name).get_config()
        if 'scale' not in config:
            raise section.error('gain', 'gain only applies to orthogonal and variance-scaling initializers')
        config['scale'] *= gain**2
        return keras.initializers.get(name).__class__.from_config(config)
    return keras.initializers.get(name)


def _make_layer(section: _Section, units: int | None = None, activation: str | None = None,
                recurrent: str | None = None, dtype: str | None = None, batch_renorm: dict | None = None):
    """The Keras layer of a cfg section; ``dtype`` is its Keras dtype policy (``mixed_bfloat16``: bfloat16
    compute on float32 weights), recurrent layers always computing in float32; ``batch_renorm`` the settings of
    batch renormalisation layers."""
    kind = section.name.split('-')[0]
    if kind == 'batchrenorm':
        return BatchRenorm(**(batch_renorm or {}), dtype=dtype)
    if kind == 'layernorm':
        return keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    if kind == 'residual':
        return ResidualBlock(units, section.get('expansion', int, 4), section.items.get('activation', 'relu'),
                             section.items.get('norm', 'layernorm'), batch_renorm, dtype=dtype)
    if kind == 'recurrent':
        return Recurrent(recurrent, section.get('units', int, required=True))
    if kind == 'flatten':
        return keras.layers.Flatten(dtype=dtype)
    if kind == 'rescaling':
        return keras.layers.Rescaling(section.get('scale', float, required=True), dtype=dtype)
    activation = section.items.get('activation', activation)
    initializer = _initializer(section)
    if kind == 'convolutional':
        return keras.layers.Conv2D(
            section.get('filters', int, required=True),
            section.get('size', int, required=True),
            section.get('stride', int, 1),
            activation=activation,
            kernel_initializer=initializer,
            dtype=dtype,
        )
    return keras.layers.Dense(units, activation=activation, kernel_initializer=initializer, dtype=dtype)


def build_model(
    path: str, observation_space, outputs: Sequence[Output], name: str = 'model', features: bool = False,
    recurrent: str | None = None, precision: str = 'float32', repeat_head: bool = False,
    batch_renorm: dict | None = None,
) -> keras.Model:
    """Build a Keras model from the cfg at ``path`` for ``observation_space``.

    Args:
        path: The ``.cfg`` file.
        observation_space: A Gymnasium Box; pictures (``is_image_space``) are scaled to [0, 1] in the model.
        outputs: What the agent needs, matched in order to the cfg's ``output=1`` sections.
        name: The Keras model name.
        features: Also output, last, the activations the first output's layer takes (the features
            of state-dependent exploration).
        recurrent: ``lstm`` or ``gru``: the cfg's ``[recurrent-N]`` section is that layer (shared with
            ``common=1``, else one per output); the model then takes ``[observations, episode_starts,
            state]`` and outputs the state after them last (see :mod:`xagents.networks.recurrence`).
        precision: ``bf16``: hidden layers compute in bfloat16 on float32 weights (Keras' ``mixed_bfloat16``);
            the output layers, and so the losses, stay float32.
        repeat_head: A cfg with one output section serves every output, each with its own tower (an agent
            whose number of critics is a parameter: TQC).
        batch_renorm: The settings of ``[batchrenorm-N]`` layers (:class:`BatchRenorm`'s ``momentum``,
            ``warmup_steps``), from an agent that trains them (calls its models with ``training=True``, as
            CrossQ does); None refuses such layers, which would otherwise never learn their statistics.

    Returns:
        A model mapping a batch of observations to the list of outputs (or one tensor if one
        output), with a ``layer_graph`` attribute used by :class:`NumpyForward`.
    """
    sections = read_cfg(path)
    heads = [section for section in sections if section.flag('output')]
    hidden = [section for section in sections if not section.flag('output')]
    if repeat_head and len(heads) == 1:
        heads = heads * len(outputs)
    if len(heads) != len(outputs):
        wanted = ', '.join(output.name for output in outputs)
        raise CfgError(
            f'{path}: expected {len(outputs)} output section(s) ({wanted}), got {len(heads)}'
        )
    if sections.index(heads[0]) < len(hidden):
        raise CfgError(f'{path}: [{heads[0].name}]: output sections must come after all hidden layers')
    memory = _memory_inputs(path, hidden, recurrent, len(outputs))
    renorms = [section for section in hidden if section.name.startswith('batchrenorm')
               or section.items.get('norm') == 'batchrenorm']
    if renorms and batch_renorm is None:
        raise renorms[0].error(None, 'batch renormalisation learns its statistics in agents that train their '
                                     'networks in training mode: CrossQ (this agent would use them untrained)')
    dtype = PRECISIONS[precision]
    keys = observation_space if isinstance(observation_space, DictObservations) else DictObservations.of(
        observation_space)
    encoders = [section for section in hidden if 'input' in section.items]
    if encoders and keys is None:
        raise encoders[0].error('input', f'input names a key of Dict observations, got {observation_space}')
    hidden = [section for section in hidden if 'input' not in section.items]
    if encoders and hidden and sections.index(encoders[-1]) > sections.index(hidden[0]):
        raise encoders[-1].error('input', f'the layers of each key (input=KEY) must come before the others, '
                                          f'but it follows [{hidden[0].name}]')
    convolutional = [section for section in hidden if section.name.startswith('convolutional')]
    if keys is not None:
        if convolutional:
            raise convolutional[0].error(None, 'convolutional layers on Dict observations belong to an image key: '
                                               'give them input=KEY')
        shape = (keys.size,)
        inputs = keras.Input(shape, dtype='float32', name='observations')
        x, flatten_input, scaled = inputs, False, False
    else:
        shape = observation_space.shape
        if convolutional and len(shape) != 3:
            raise convolutional[0].error(
                None, f'convolutional layers need image observations, got shape {shape}'
            )
        # Pictures enter as uint8 (and exports take them so); anything else may arrive normalised, as floats.
        pictures = is_image_space(observation_space)
        inputs = keras.Input(shape, dtype=observation_space.dtype if pictures else 'float32', name='observations')
        x = keras.ops.cast(inputs, 'float32')
        scaled = pictures or (  # pictures, and uint8 vectors (Atari's RAM); not grids
            observation_space.dtype == np.uint8 and len(shape) != 3)
        if scaled:
            x = keras.layers.Rescaling(1 / 255)(x)
        flatten_input = len(shape) > 1 and not convolutional
        if flatten_input:
            x = keras.layers.Flatten()(x)
    trunk, tower = [], []
    for section in hidden:
        if section.flag('common') and tower:
            raise section.error('common', f'shared (common=1) layers must come before the per-output '
                                          f'layers, but it follows [{tower[0].name}]')
        (trunk if section.flag('common') else tower).append(section)
        if section.name.startswith(('dense', 'residual')) and 'units' not in section.items:
            raise section.error('units', 'missing required key')
    graph = LayerGraph(trunk=[], branches=[], features=features, flatten_input=flatten_input,
                       input_scale=np.float32(1 / 255) if scaled else None,
                       state_size=memory.size if memory else 0)
    flat = len(shape) == 1 or flatten_input
    weights = 0

    def fits(section: _Section, units: int | None, inputs) -> None:
        """Refuse a layer that takes the model's weights past memory (before Keras allocates them)."""
        nonlocal weights
        kind = section.name.split('-')[0]
        if kind == 'dense':
            weights += (int(inputs.shape[-1]) + 1) * units
        elif kind == 'convolutional':
            size = section.get('size', int, required=True)
            weights += (size * size * int(inputs.shape[-1]) + 1) * section.get('filters', int, required=True)
        elif kind == 'recurrent':
            units = section.get('units', int, required=True)
            weights += GATES[recurrent] * (int(inputs.shape[-1]) + units + 2) * units
        elif kind == 'residual':
            if int(inputs.shape[-1]) != units:
                raise section.error('units', f'a residual block adds its input to its output: it takes {units} '
                                             f'features, got {int(inputs.shape[-1])} (put a [dense-N] of units={units} '
                                             f'before it)')
            weights += (2 * units + 1) * units * section.get('expansion', int, 4) + 3 * units
        # Weights, gradients and two Adam moments, in float32.
        check_fits(f'{path}: [{section.name}]: a model of {weights:,} weights', 16 * weights,
                   'use fewer units or filters')

    if keys is not None:
        x, graph.input_scale = _encoded(path, keys, encoders, x, fits, dtype)
        if graph.input_scale is None:  # a CNN or dense layers per key: acting runs the Keras model (see Forward)
            graph = None
    for section in trunk:
        flat = _check_fits(section, flat)
        fits(section, section.get('units', int), x)
        layer = _make_layer(section, section.get('units', int), recurrent=recurrent, dtype=dtype,
                            batch_renorm=batch_renorm)
        if graph:
            graph.trunk.append(layer)
        x = memory.apply(layer, x) if memory else layer(x)
    results = []
    for section, output in zip(heads, outputs):
        units = section.get('units', int, output.units)
        if units != output.units:
            raise section.error('units', f'expected {output.units} for output {output.name!r}, got {units}')
        branch, y, branch_flat = [], x, flat
        for tower_section in tower:
            branch_flat = _check_fits(tower_section, branch_flat)
            fits(tower_section, tower_section.get('units', int), y)
            layer = _make_layer(tower_section, tower_section.get('units', int), recurrent=recurrent, dtype=dtype,
                                batch_renorm=batch_renorm)
            branch.append(layer)
            y = memory.apply(layer, y) if memory else layer(y)
        _check_fits(section, branch_flat)
        fits(section, units, y)
        head = _make_layer(section, units, output.activation)
        branch.append(head)
        if graph:
            graph.branches.append(branch)
        results.append(head(y))
        if features and len(results) == 1:
            last_hidden = y
    if features:
        # gSDE's features: its noise and log-probs are computed in float32 whatever the hidden layers' precision.
        results.append(last_hidden if dtype is None else keras.ops.cast(last_hidden, 'float32'))
    if memory:
        results.append(memory.next_state())
        inputs = [inputs, memory.starts, memory.state]
    model = CfgModel(inputs, results if len(results) > 1 else results[0], name=name)
    model.layer_graph = graph
    return model


class CfgModel(keras.Model):
    """A model built from a cfg. Called on tensors, a small all-dense one runs its layers' maths directly in
    ``keras.ops`` (:func:`direct_forward`), without Keras' call machinery around each layer: on PyTorch, which runs
    eagerly, that machinery took 4.7x the time of a 64-64 MLP's forward pass; compiled backends trace the same
    operations either way. Anything else goes through Keras' own call."""

    _direct: Callable | None = None

    @property
    def layer_graph(self) -> LayerGraph | None:
        return self.__dict__.get('_layer_graph')

    @layer_graph.setter
    def layer_graph(self, graph: LayerGraph | None) -> None:
        # Decided once, as built (an export briefly computes a bf16 model in float32); set past Keras' attribute
        # tracking, which would track the variables the direct pass holds.
        object.__setattr__(self, '_layer_graph', graph)
        object.__setattr__(self, '_direct', direct_forward(self) if graph is not None else None)

    def __call__(self, inputs, training=None, **kwargs):
        if self._direct is None or kwargs or isinstance(inputs, (list, tuple, dict, keras.KerasTensor)):
            return super().__call__(inputs, training=training, **kwargs)
        return self._direct(inputs, bool(training))


def direct_forward(model: keras.Model) -> Callable | None:
    """``model``'s forward pass as ``keras.ops`` on its variables, dense layers computed as ``Dense.call`` computes
    them and other layers (batch renormalisation, layer norm, residual blocks) called; None unless
    :meth:`NumpyForward.supports` the model and it carries no recurrent state."""
    if not NumpyForward.supports(model) or model.layer_graph.state_size:
        return None
    graph = model.layer_graph

    def step(layer):
        if isinstance(layer, keras.layers.Dense):
            kernel, bias, activation = layer.kernel, layer.bias, layer.activation
            def dense_call(x, training):
                x = keras.ops.matmul(x, kernel)
                return activation(x if bias is None else keras.ops.add(x, bias))
            return dense_call
        if isinstance(layer, (BatchRenorm, ResidualBlock)):
            return lambda x, training: layer(x, training=training)
        return lambda x, training: layer(x)

    trunk = [step(layer) for layer in graph.trunk]
    branches = [[step(layer) for layer in branch] for branch in graph.branches]
    scale = graph.input_scale

    def forward(inputs, training: bool):
        x = keras.ops.cast(inputs, 'float32')
        if graph.flatten_input:
            x = keras.ops.reshape(x, (keras.ops.shape(x)[0], -1))
        if scale is not None:
            x = keras.ops.multiply(x, scale)
        for layer in trunk:
            x = layer(x, training)
        results, head_inputs = [], []
        for branch in branches:
            y = x
            for layer in branch[:-1]:
                y = layer(y, training)
            head_inputs.append(y)
            results.append(branch[-1](y, training))
        results += head_inputs[:1] if graph.features else []
        return results if len(results) > 1 else results[0]

    return forward


PRECISIONS = {'float32': None, 'bf16': 'mixed_bfloat16'}  # a model's precision: its hidden layers' dtype policy


@contextlib.contextmanager
def computing_in_float32(models: Sequence[keras.Model]):
    """Within the block, every layer of ``models`` computes in float32 (their weights already are): what an
    export of a bf16 agent traces, since TFLite's builtin ops and most deployment runtimes take no bfloat16."""
    changed = [(layer, layer.dtype_policy) for model in models for layer in model._flatten_layers(include_self=False)
               if layer.compute_dtype != 'float32']
    for layer, _ in changed:
        layer.dtype_policy = 'float32'
    try:
        yield
    finally:
        for layer, policy in changed:
            layer.dtype_policy = policy
NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # filters, size, stride (Mnih et al. 2015)
NATURE_CNN_FEATURES = 256  # the dense layer after it (Stable-Baselines3's cnn_output_dim)


def default_encoder(key: Key) -> str:
    """What a key of a Dict observation gets when its cfg names no layers for it: ``nature-cnn`` for pictures
    (uint8 images at least 36 pixels high and wide, scaled to [0, 1]: the Nature CNN's three layers, flattened,
    then a 256-unit ReLU layer, as Stable-Baselines3's ``NatureCNN``), ``flatten`` for vectors and smaller uint8
    images (grids of values, such as MiniGrid's 7x7 ids, which enter as they are), ``one-hot`` for Discrete and
    MultiDiscrete keys."""
    if key.kind == 'image':
        return 'nature-cnn'
    return 'one-hot' if key.kind == 'discrete' else 'flatten'


def _encoded(path: str, keys: DictObservations, sections: list[_Section], packed, fits: Callable,
             dtype: str | None = None) -> tuple[keras.KerasTensor, np.ndarray | None]:
    """Every key of packed Dict observations through its encoder, concatenated (float32, flat); and when
    every encoder only flattens and scales, what that does to each packed entry (the concatenation is then
    the packed vector times it, which :class:`NumpyForward` computes without the layers)."""
    scale = np.ones(keys.size, np.float32)
    by_key: dict[str, list[_Section]] = {}
    for section in sections:
        name = section.items['input']
        if name not in keys.names:
            raise section.error('input', f'unknown observation key {name!r}, expected one of: {" ".join(keys.names)}')
        by_key.setdefault(name, []).append(section)
    features = []
    for key in keys.keys:
        x = keras.layers.Reshape(key.shape, name=f'{key.name}_input')(packed[:, key.offset:key.offset + key.size])
        entries = slice(key.offset, key.offset + key.size)
        if key.kind == 'image':
            x = keras.layers.Rescaling(1 / 255)(x)
            scale[entries] /= 255
        own = by_key.get(key.name)
        if own is None and default_encoder(key) == 'nature-cnn':
            scale = None
            for filters, size, stride in NATURE_CNN:
                x = keras.layers.Conv2D(filters, size, stride, activation='relu', dtype=dtype,
                                        kernel_initializer=keras.initializers.Orthogonal(np.sqrt(2)))(x)
            x = keras.layers.Flatten(dtype=dtype)(x)
            x = keras.layers.Dense(NATURE_CNN_FEATURES, activation='relu', dtype=dtype,
                                   kernel_initializer=keras.initializers.Orthogonal(np.sqrt(2)))(x)
        flat = len(key.shape) == 1
        for section in own or ():
            if section.name.startswith('convolutional') and key.kind not in ('image', 'grid'):
                raise section.error('input', f'convolutional layers need an image key, {key.name!r} is {key.space}')
            flat = _check_fits(section, flat)
            fits(section, section.get('units', int), x)
            layer = _make_layer(section, section.get('units', int), dtype=dtype)
            if isinstance(layer, keras.layers.Rescaling) and scale is not None:
                scale[entries] *= layer.scale
            elif not isinstance(layer, keras.layers.Flatten):
                scale = None
            x = layer(x)
        if len(x.shape) > 2:
            if own and not flat:
                raise own[-1].error(None, f'the layers of {key.name!r} must end flat: add a [flatten-N] section '
                                          f'with input={key.name}')
            x = keras.layers.Flatten()(x)
        features.append(x)
    return features[0] if len(features) == 1 else keras.layers.Concatenate()(features), scale


def check_model(model: keras.Model, observation_space, outputs: Sequence[Output], features: bool, owner: str) -> None:
    """Refuse a user's Keras model whose outputs are not what the agent needs (their number and sizes, e.g. 3
    logits for 2 actions, or a missing value head), or that cannot take the env's observations: one ValueError
    when the agent is built, not a shape error inside a graph later."""
    wanted = ', '.join(f'{output.name} ({output.units} units)' for output in outputs) + (
        ', features (the last hidden activations, for gSDE)' if features else '')
    try:
        results = keras.tree.flatten(model(np.zeros((2, *observation_space.shape), observation_space.dtype)))
    except Exception as error:  # a model of another input shape: Keras says which in its own words
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f'{owner}: expected it to take observations shaped {observation_space.shape}, '
                         f'calling it failed: {first}') from None
    sizes = [int(result.shape[-1]) if len(result.shape) > 1 else 1 for result in results]
    if len(sizes) != len(outputs) + features or any(
            size != output.units for size, output in zip(sizes, outputs)):
        raise ValueError(f'{owner}: expected outputs {wanted}, got {len(sizes)} output(s) of '
                         f'size {", ".join(map(str, sizes))}')


def check_precision(model: keras.Model, precision: str, owner: str) -> None:
    """Refuse ``precision='bf16'`` with a user's Keras model that computes in float32: bf16 sets the dtype policy of
    the layers .cfg models build, and a model built elsewhere keeps its own, so it would run in float32 unsaid. A
    model whose layers already compute in bfloat16 (built under ``mixed_bfloat16``) is taken as it is."""
    if PRECISIONS.get(precision) is None:
        return
    if any(layer.compute_dtype == 'bfloat16' for layer in model._flatten_layers(include_self=False)):
        return
    raise ValueError(f"{owner}: precision='bf16' sets the dtype policy of .cfg models; a Keras model of yours keeps "
                     f"its own (float32 here): build it under keras.mixed_precision.set_dtype_policy('mixed_bfloat16') "
                     f"(outputs in float32), or leave precision at float32")


def _check_fits(section: _Section, flat: bool) -> bool:
    """Refuse a dense layer on unflattened images; return whether the activations are flat."""
    kind = section.name.split('-')[0]
    if kind in ('dense', 'recurrent', 'batchrenorm', 'residual', 'layernorm') and not flat:
        raise section.error(None, f'{kind} layer on image activations: add a [flatten-N] section before it')
    return flat or kind == 'flatten'


class NumpyForward:
    """Evaluate an all-dense cfg model (recurrent layers included, one step) in NumPy, from a copy of its weights.

    Call :meth:`refresh` after every update so the copy follows the trained weights.
    """

    def __init__(self, model: keras.Model) -> None:
        self.model = model
        self.graph: LayerGraph = model.layer_graph
        self.scale = self.graph.input_scale
        self.refresh()

    @staticmethod
    def supports(model: keras.Model) -> bool:
        """True if ``model`` came from a cfg and has only dense layers with NumPy activations (and recurrent ones)."""
        graph = getattr(model, 'layer_graph', None)
        if graph is None:
            return False
        layers = graph.trunk + [layer for branch in graph.branches for layer in branch]
        def dense(layer) -> bool:
            return (isinstance(layer, keras.layers.Dense) and layer.activation.__name__ in NUMPY_ACTIVATIONS
                    and layer.compute_dtype == 'float32')

        return all(
            isinstance(layer, (Recurrent, BatchRenorm)) or dense(layer)
            or isinstance(layer, keras.layers.LayerNormalization) and layer.compute_dtype == 'float32'
            or isinstance(layer, ResidualBlock) and dense(layer.expand) and dense(layer.project)
            for layer in layers
        )

    def refresh(self) -> None:
        """Copy the model's current weights."""
        def params(layer):
            if isinstance(layer, BatchRenorm):  # outside training, x * a + b per feature
                a, b = layer.inference_affine()
                return lambda x: x * a + b
            if isinstance(layer, keras.layers.LayerNormalization):
                return layer_norm(layer.gamma.numpy(), layer.beta.numpy(), layer.epsilon)
            if isinstance(layer, ResidualBlock):  # x + project(expand(norm(x)))
                norm, expand, project = (params(part) for part in (layer.normalise, layer.expand, layer.project))
                return lambda x: x + dense(dense(norm(x), expand), project)
            weights = tuple(weight.numpy() for weight in layer.weights)
            if isinstance(layer, Recurrent):
                return layer, weights
            return weights + (NUMPY_ACTIVATIONS[layer.activation.__name__],)

        self.trunk = [params(layer) for layer in self.graph.trunk]
        self.branches = [[params(layer) for layer in branch] for branch in self.graph.branches]

    def __call__(self, observations: np.ndarray, starts: np.ndarray | None = None,
                 state: np.ndarray | None = None) -> list[np.ndarray]:
        x = np.asarray(observations, np.float32)  # no copy for float32 input
        if self.graph.flatten_input:
            x = x.reshape(len(x), -1)
        if self.scale is not None:
            x = x * self.scale
        next_state = np.empty_like(state) if self.graph.state_size else None

        def layers(x: np.ndarray, params: list) -> np.ndarray:
            for entry in params:
                if callable(entry):  # batch renormalisation, a layer norm or a residual block
                    x = entry(x)
                elif isinstance(entry[0], Recurrent):  # one step from the state (zeroed where episodes start)
                    layer, weights = entry
                    own = slice(layer.state_offset, layer.state_offset + layer.state_size)
                    new = numpy_step(layer.kind, weights, x, state[:, own] * (1 - starts[:, :1]))
                    next_state[:, own] = new
                    x = new[:, :layer.units]
                else:
                    x = dense(x, entry)
            return x

        x = layers(x, self.trunk)
        results, head_inputs = [], []
        for branch in self.branches:
            y = layers(x, branch[:-1])
            head_inputs.append(y)
            results.append(layers(y, branch[-1:]))
        results += head_inputs[:1] if self.graph.features else []
        return results + [next_state] if next_state is not None else results


def dense(x: np.ndarray, params: tuple) -> np.ndarray:
    """A dense layer in NumPy: ``activation(x @ kernel + bias)`` of ``params = (kernel, bias, activation)``."""
    kernel, bias, activation = params
    return activation(x @ kernel + bias)


def layer_norm(gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> Callable[[np.ndarray], np.ndarray]:
    """Keras' LayerNormalization over the last axis, in NumPy."""
    def normalise(x: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon) * gamma + beta
    return normalise


class Forward:
    """The acting forward pass of one or more models: every model's outputs, in order, as NumPy arrays.

    When every model is a small all-dense cfg model it runs in NumPy on the host, on copies of their weights: a
    graph call costs more than such a pass on a CPU, and on a GPU too, where each call is a round trip to the
    device (CrossQ's 10,000 first steps on Hopper-v5, an H100 with JAX: 4.5 s outside the updates against 9.0 s). Other
    models (a CNN, a Keras model of the user's) run in one graph call, on the GPU when there is one. Call
    :meth:`refresh` after the weights change (agents do, through ``on_weights_changed``). A recurrent model
    is called with ``(observations, episode_starts (B, 1), state)``.
    """

    def __init__(self, *models: keras.Model) -> None:
        self.models = models
        in_numpy = all(map(NumpyForward.supports, models))
        self.numpy = [NumpyForward(model) for model in models] if in_numpy else None
        # Batch sizes vary (envs, final observations, play): TensorFlow traces for any.
        self.graph = None if self.numpy else backend.compiled(
            lambda *inputs: [output for model in models
                             for output in keras.tree.flatten(model(list(inputs) if len(inputs) > 1 else inputs[0]))],
            lambda: [variable for model in models for variable in model.variables], reduce_retracing=True)

    def refresh(self) -> None:
        for forward in self.numpy or ():
            forward.refresh()

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        if self.numpy:
            return [output for forward in self.numpy for output in forward(*inputs)]
        return [keras.ops.convert_to_numpy(output) for output in self.graph(*inputs)]

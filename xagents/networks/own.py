"""A user's own network as the Keras model an agent trains: a ``torch.nn.Module`` (PyTorch backend), a Flax linen
module (JAX backend) or any Keras layer (``keras.layers.JaxLayer`` around plain JAX functions, among others) becomes
a functional model of the env's observations, so that every agent trains, saves and acts with it as with its own."""
from __future__ import annotations

import contextlib
import copy
import sys
import types

import gymnasium as gym
import keras
import numpy as np

from xagents.backend import NAME as BACKEND


def as_keras_model(network, observation_space: gym.Space, name: str, owner: str) -> keras.Model:
    """``network`` as a Keras model taking ``observation_space``'s observations (as float32, images unscaled) and
    returning what ``network`` returns (a tensor, or a tuple of them: the agent's outputs in order), checked by
    :func:`check_network`."""
    if isinstance(network, keras.Model):
        model = network
    else:
        layer = _as_layer(network, observation_space, owner)
        inputs = keras.Input(observation_space.shape, dtype='float32', name='observations')
        with _tensorflow_unasked():
            outputs = layer(inputs)
        model = keras.Model(inputs, list(outputs) if isinstance(outputs, (tuple, list)) else outputs, name=name)
    check_network(model, observation_space, owner)
    return model


def check_network(model: keras.Model, observation_space: gym.Space, owner: str) -> None:
    """Refuse, in one ValueError when the agent is built, a network that would fail inside the framework later or
    train wrongly unsaid: outputs not float32 (integers, float16, bool, complex), not shaped ``(batch, units)``
    with one row per observation (probed at two batch sizes: a row shared by the batch makes ``predict`` return
    one action), not finite on zero observations, or no trainable weights (nothing would train)."""
    for batch in PROBE_BATCHES:
        outputs = keras.tree.flatten(_probe(model, np.zeros((batch, *observation_space.shape),
                                                            observation_space.dtype), observation_space, owner))
        for index, output in enumerate(outputs, 1):
            which = f'output {index} of {len(outputs)}'
            dtype = keras.backend.standardize_dtype(output.dtype)
            if dtype != 'float32':
                raise ValueError(f'{owner}: expected float32 outputs, got {dtype} ({which}): cast it in the network '
                                 "(.float() in PyTorch, dtype='float32' on its last Keras layer)")
            shape = tuple(output.shape)
            if len(shape) != 2 or shape[0] != batch:
                raise ValueError(f'{owner}: expected outputs shaped (batch, units), one row per observation, got '
                                 f'{shape} for a batch of {batch} ({which}): keep the batch axis first, reduce '
                                 'nothing across it, and reshape other axes into units')
            values = keras.ops.convert_to_numpy(output)
            if not np.isfinite(values).all():
                raise ValueError(f'{owner}: expected finite outputs, got {"nan" if np.isnan(values).any() else "inf"} '
                                 f'on zero observations ({which}): check its initial weights and operations such '
                                 'as log, sqrt or division')
    if not model.trainable_weights:
        frozen = len(model.weights)
        raise ValueError(f'{owner}: expected trainable weights, got {"none" if not frozen else f"{frozen} frozen"}, '
                         'so nothing would train: give it layers with weights (parameters with requires_grad=True '
                         'in PyTorch, trainable Keras layers)')


PROBE_BATCHES = (2, 5)


def _probe(call, observations, observation_space: gym.Space, owner: str):
    """``call(observations)``, or one ValueError in the framework's own words where it cannot take them."""
    try:
        return call(observations)
    except Exception as error:  # a network of another input size: the framework says which in its own words
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f'{owner}: expected it to take observations shaped {observation_space.shape}, '
                         f'calling it failed: {first}') from None


def copy_model(model: keras.Model) -> keras.Model:
    """A model alike with fresh weights (a target network): Keras' ``clone_model``, which makes a wrapped PyTorch,
    Flax or JAX network afresh from its module or functions (Keras' own clone would serialise them, and cannot)."""
    with _tensorflow_unasked():
        return keras.models.clone_model(model, clone_function=_fresh_layer)


def _as_layer(network, observation_space: gym.Space, owner: str) -> keras.layers.Layer:
    if isinstance(network, keras.layers.Layer):
        return network
    torch = sys.modules.get('torch')
    if torch is not None and isinstance(network, torch.nn.Module):
        _require_backend('torch', 'a torch.nn.Module', owner)
        return _torch_layer(network, observation_space, owner)
    linen = sys.modules.get('flax.linen')
    if linen is not None and isinstance(network, linen.Module):
        _require_backend('jax', 'a Flax module', owner)
        return keras.layers.FlaxLayer(network)
    raise ValueError(f'{owner}: expected a .cfg file, a Keras model or layer, a torch.nn.Module (PyTorch backend) '
                     f'or a Flax linen module (JAX backend), got {type(network).__name__}')


def _require_backend(wanted: str, what: str, owner: str) -> None:
    if BACKEND != wanted:
        raise ValueError(f'{owner}: {what} trains on the {wanted} backend (--backend {wanted} or '
                         f'KERAS_BACKEND={wanted}), and this run is on {BACKEND}')


def _torch_layer(module, observation_space: gym.Space, owner: str) -> keras.layers.Layer:
    """``module`` wrapped, with the output shapes one call on zeros finds (Keras cannot infer a module's)."""
    import torch

    layer = keras.layers.TorchModuleWrapper(module)
    with torch.no_grad():
        outputs = _probe(module, keras.ops.zeros((2, *observation_space.shape)), observation_space, owner)
    if isinstance(outputs, list):
        outputs = tuple(outputs)
    if not (isinstance(outputs, torch.Tensor) or isinstance(outputs, tuple) and all(
            isinstance(output, torch.Tensor) for output in outputs)):
        raise ValueError(f'{owner}: expected it to return a tensor or a tuple of tensors, '
                         f'got {type(outputs).__name__}')
    layer.output_shape = keras.tree.map_structure(lambda output: (None, *output.shape[1:]), outputs)
    return layer


def _fresh_layer(layer: keras.layers.Layer) -> keras.layers.Layer:
    if isinstance(layer, keras.layers.TorchModuleWrapper):
        return keras.layers.TorchModuleWrapper(copy.deepcopy(layer.module), output_shape=layer.output_shape)
    if isinstance(layer, keras.layers.FlaxLayer):
        return keras.layers.FlaxLayer(layer.module, method=layer.method)
    if isinstance(layer, keras.layers.JaxLayer):
        return keras.layers.JaxLayer(layer.call_fn, init_fn=layer.init_fn)
    return layer.__class__.from_config(layer.get_config())


@contextlib.contextmanager
def _tensorflow_unasked():
    """Keras 3.15's ``JaxLayer`` (and ``FlaxLayer``) asks TensorFlow, when it builds, whether it runs inside a
    ``tf.function``: on JAX that imports TensorFlow (or fails where it is not installed). On JAX it does not, so
    until TensorFlow is imported anyway, the answer is given without it."""
    lazy = keras.src.utils.module_utils.tensorflow
    if BACKEND != 'jax' or lazy.module is not None or sys.modules.get('tensorflow') is not None:
        yield
        return
    lazy.module = types.SimpleNamespace(inside_function=lambda: False)
    try:
        yield
    finally:
        lazy.module = None


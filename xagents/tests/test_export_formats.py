"""Exported policies act as the TensorFlow policy does, in every format, and exports never clobber."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from xagents.storage import export_tensorflow
from xagents.storage.export import FORMATS, export_policy, load_exported

RUNTIMES = {'saved_model': (), 'tflite': ('ai_edge_litert',), 'onnx': ('tf2onnx', 'onnxruntime')}


@dataclass
class Case:
    """A policy, the space it observes and 100 observations to compare its exports on."""

    policy: Callable[[tf.Tensor], tf.Tensor]
    space: gym.spaces.Box
    observations: np.ndarray
    discrete: bool


def env_observations(env_id: str, count: int = 100, seed: int = 0) -> tuple[gym.spaces.Box, np.ndarray]:
    """Observations met by a random policy in a real env, with the env's observation space."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    observation, _ = env.reset(seed=seed)
    found = []
    while len(found) < count:
        found.append(observation)
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    return env.observation_space, np.stack(found)


def mlp(inputs: int, outputs: int) -> tf.keras.Model:
    """A small dense network, the kind xagents builds for vector observations."""
    tf.keras.utils.set_random_seed(0)
    return tf.keras.Sequential(
        [
            tf.keras.Input((inputs,)),
            tf.keras.layers.Dense(32, activation='tanh'),
            tf.keras.layers.Dense(32, activation='tanh'),
            tf.keras.layers.Dense(outputs),
        ]
    )


def cartpole_case() -> Case:
    """Normalise with constant mean and std, run an MLP, take the argmax."""
    space, observations = env_observations('CartPole-v1')
    model = mlp(4, 2)
    mean = tf.constant([0.0, 0.1, 0.0, -0.1])
    std = tf.Variable([2.4, 2.0, 0.21, 2.5], trainable=False)

    def policy(batch: tf.Tensor) -> tf.Tensor:
        return tf.argmax(model((batch - mean) / std), axis=-1)

    return Case(policy, space, observations, discrete=True)


def pendulum_case() -> Case:
    """Squash an MLP's output with tanh and scale it to the action bounds."""
    space, observations = env_observations('Pendulum-v1')
    model = mlp(3, 1)
    low, high = gym.make('Pendulum-v1').action_space.low, gym.make('Pendulum-v1').action_space.high

    def policy(batch: tf.Tensor) -> tf.Tensor:
        return low + (tf.tanh(model(batch)) + 1.0) * (high - low) / 2.0

    return Case(policy, space, observations, discrete=False)


def atari_case() -> Case:
    """A Nature-style CNN on stacked uint8 frames, scaled to [0, 1], then argmax."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((84, 84, 4)),
            tf.keras.layers.Conv2D(16, 8, strides=4, activation='relu'),
            tf.keras.layers.Conv2D(32, 4, strides=2, activation='relu'),
            tf.keras.layers.Conv2D(32, 3, strides=1, activation='relu'),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation='relu'),
            tf.keras.layers.Dense(6),
        ]
    )
    space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    observations = np.random.default_rng(0).integers(0, 256, (100, 84, 84, 4), dtype=np.uint8)

    def policy(batch: tf.Tensor) -> tf.Tensor:
        return tf.argmax(model(tf.cast(batch, tf.float32) / 255.0), axis=-1)

    return Case(policy, space, observations, discrete=True)


CASES = {'cartpole': cartpole_case, 'pendulum': pendulum_case, 'atari': atari_case}


@pytest.fixture(scope='module', params=list(CASES))
def case(request) -> Case:
    """Each policy, built once for all formats."""
    return CASES[request.param]()


@pytest.fixture(params=FORMATS)
def format(request) -> str:
    """Each export format, skipped where its converter or runtime is not installed."""
    for module in RUNTIMES[request.param]:
        pytest.importorskip(module)
    return request.param


def test_export_acts_like_the_policy(case, format, tmp_path):
    path = export_policy(case.policy, case.space, str(tmp_path / f'policy.{format}'), format)
    expected = case.policy(tf.constant(case.observations)).numpy()
    actions = load_exported(path, format)(case.observations)
    assert os.listdir(tmp_path) == [os.path.basename(path)]
    if case.discrete:
        assert actions.dtype == np.int64
        np.testing.assert_array_equal(actions, expected)
    else:
        assert actions.dtype == np.float32
        np.testing.assert_allclose(actions, expected, atol=1e-5)


def test_without_a_format_the_path_names_it(format, tmp_path):
    case = cartpole_case()
    path = str(tmp_path / {'saved_model': 'policy', 'tflite': 'policy.tflite', 'onnx': 'policy.ONNX'}[format])
    export_policy(case.policy, case.space, path)
    assert os.path.isdir(path) == (format == 'saved_model')
    # Read back by the format's own runtime: a file of another format would not load.
    np.testing.assert_array_equal(load_exported(path, format)(case.observations),
                                  case.policy(tf.constant(case.observations)).numpy())


def test_export_takes_any_batch_size(format, tmp_path):
    case = cartpole_case()
    act = load_exported(export_policy(case.policy, case.space, str(tmp_path / 'policy'), format), format)
    for size in (1, 7, 1, 100):
        batch = case.observations[:size]
        np.testing.assert_array_equal(act(batch), case.policy(tf.constant(batch)).numpy())


@pytest.mark.parametrize('existing', ['file', 'directory'])
@pytest.mark.parametrize('chosen', FORMATS)
def test_export_refuses_an_existing_path(chosen, existing, tmp_path):
    case = cartpole_case()
    path = tmp_path / 'policy'
    if existing == 'file':
        path.write_bytes(b'keep me')
    else:
        path.mkdir()
        (path / 'inside').write_bytes(b'keep me')
    with pytest.raises(ValueError, match='already exists'):
        export_policy(case.policy, case.space, str(path), chosen)
    if existing == 'file':
        assert path.read_bytes() == b'keep me'
    else:
        assert os.listdir(path) == ['inside'] and (path / 'inside').read_bytes() == b'keep me'
    assert os.listdir(tmp_path) == ['policy']


def test_unknown_format_is_refused(tmp_path):
    case = cartpole_case()
    with pytest.raises(ValueError, match='unknown export format .*saved_model, tflite, onnx'):
        export_policy(case.policy, case.space, str(tmp_path / 'policy'), 'torchscript')
    with pytest.raises(ValueError, match='unknown export format'):
        load_exported(str(tmp_path / 'policy'), 'torchscript')
    assert os.listdir(tmp_path) == []


def test_missing_converter_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, 'tf2onnx', None)
    case = cartpole_case()
    with pytest.raises(ImportError, match=r"exporting to onnx needs the tf2onnx package: pip install .*'tf2onnx>=") as raised:
        export_policy(case.policy, case.space, str(tmp_path / 'policy.onnx'), 'onnx')
    assert '\n' not in str(raised.value)
    assert os.listdir(tmp_path) == []


def test_failed_saved_model_write_leaves_nothing(monkeypatch, tmp_path):
    def half_write(module, directory, signatures=None):
        open(os.path.join(directory, 'saved_model.pb'), 'wb').close()
        raise OSError('disk full')

    monkeypatch.setattr(export_tensorflow.tf.saved_model, 'save', half_write)
    case = cartpole_case()
    with pytest.raises(OSError, match='disk full'):
        export_policy(case.policy, case.space, str(tmp_path / 'policy'), 'saved_model')
    assert os.listdir(tmp_path) == []

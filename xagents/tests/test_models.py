"""The .cfg model reader: shipped cfgs build with the right outputs, bad cfgs name file/section/key."""
import glob
import os

import gymnasium as gym
import keras
import numpy as np
import pytest

import xagents
from xagents import backend
from xagents.networks.models import CfgError, NumpyForward, Output, build_model, is_image_space
from xagents.utils.quiet_tensorflow import tf

PACKAGE = os.path.dirname(os.path.dirname(__file__))
VECTOR_SPACE = gym.spaces.Box(-1, 1, (6,), np.float32)
IMAGE_SPACE = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)


def write(tmp_path, text, name='model.cfg'):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SHIPPED = sorted(glob.glob(os.path.join(PACKAGE, 'models', '*.cfg')) + glob.glob(os.path.join(PACKAGE, '*', 'models', '*.cfg')))


@pytest.mark.parametrize('path', SHIPPED)
def test_every_shipped_cfg_builds_with_requested_outputs(path):
    space = IMAGE_SPACE if os.path.basename(path).startswith('cnn') else VECTOR_SPACE
    if os.path.basename(path).startswith('minigrid'):  # MiniGrid's image and direction (a Dict: packed input)
        space = gym.spaces.Dict({'image': gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), 'direction': gym.spaces.Discrete(4)})
    from xagents.networks.models import read_cfg
    from xagents.envs.observations import DictObservations

    heads = [section for section in read_cfg(path) if section.flag('output')]
    # Heads without units are filled from what the agent asks (3 + i here); fixed ones keep theirs.
    outputs = [Output(f'out{i}', head.get('units', int, 3 + i)) for i, head in enumerate(heads)]
    recurrent = 'lstm' if 'recurrent' in os.path.basename(path) else None
    batch_renorm = {} if any(section.name.startswith('batchrenorm') for section in read_cfg(path)) else None
    model = build_model(path, space, outputs, recurrent=recurrent, batch_renorm=batch_renorm)
    packed = DictObservations.of(space)
    observations = np.zeros((2, packed.size), np.float32) if packed else np.zeros((2, *space.shape), space.dtype)
    if recurrent:  # two envs, one step each, from zero states; the state after it comes last
        state_size = model.layer_graph.state_size if model.layer_graph else int(model.outputs[-1].shape[-1])
        *results, state = model([observations, np.ones((2, 1), np.float32), np.zeros((2, state_size), np.float32)])
        assert state.shape == (2, state_size)
    else:
        results = model(observations)
    results = results if isinstance(results, (list, tuple)) else [results]
    assert heads and len(results) == len(heads)
    assert [tuple(result.shape) for result in results] == [(2, output.units) for output in outputs]


def test_shared_trunk_and_towers(tmp_path):
    path = write(tmp_path, '[dense-1]\nunits=8\ncommon=1\n[dense-2]\nunits=5\n'
                           '[dense-3]\noutput=1\n[dense-4]\nunits=1\noutput=1\n')
    model = build_model(path, VECTOR_SPACE, [Output('policy', 2), Output('value', 1)])
    graph = model.layer_graph
    assert len(graph.trunk) == 1
    # The non-common hidden layer is built once per output: two towers of (dense-2, head).
    assert [len(branch) for branch in graph.branches] == [2, 2]
    assert graph.branches[0][0] is not graph.branches[1][0]
    # 6*8+8 (trunk) + 2*(8*5+5) (towers) + 5*2+2 + 5*1+1 (heads)
    assert model.count_params() == 56 + 90 + 12 + 6


def test_numpy_forward_matches_keras(tmp_path):
    path = write(tmp_path, '[dense-1]\nunits=16\nactivation=tanh\n[dense-2]\nunits=16\nactivation=relu\n'
                           '[dense-3]\noutput=1\n[dense-4]\nunits=1\noutput=1\n')
    model = build_model(path, VECTOR_SPACE, [Output('policy', 3), Output('value', 1)])
    assert NumpyForward.supports(model)
    observations = np.random.default_rng(0).uniform(-1, 1, (5, 6)).astype(np.float32)
    expected = [output.numpy() for output in model(observations)]
    forward = NumpyForward(model)
    for got, want in zip(forward(observations), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    model.layers[-1].kernel.assign(model.layers[-1].kernel + 1)
    forward.refresh()
    assert not np.allclose(forward(observations)[1], expected[1])


def test_a_dense_model_acts_in_numpy_where_tensorflow_sees_a_gpu_too(tmp_path, monkeypatch):
    # No GPU runs here: the device list is the one thing replaced. A graph call is a round trip to the device, so a
    # small dense model acts on the host there too; its copy follows the weights as on a CPU.
    from xagents.networks.models import Forward

    path = write(tmp_path, '[dense-1]\nunits=16\nactivation=tanh\n[dense-2]\noutput=1\n[dense-3]\nunits=1\noutput=1\n')
    model = build_model(path, VECTOR_SPACE, [Output('policy', 3), Output('value', 1)])
    observations = np.random.default_rng(0).uniform(-1, 1, (5, 6)).astype(np.float32)
    real = tf.config.list_logical_devices
    monkeypatch.setattr(tf.config, 'list_logical_devices',
                        lambda kind=None: [object()] if kind == 'GPU' else real(kind))
    assert backend.gpu_available()
    forward = Forward(model)
    assert forward.numpy is not None and forward.graph is None
    model.layers[-1].kernel.assign(model.layers[-1].kernel + 1)
    forward.refresh()
    for got, want in zip(forward(observations), model(observations)):
        np.testing.assert_allclose(got, keras.ops.convert_to_numpy(want), rtol=1e-5, atol=1e-5)


def test_cnn_model_is_not_mirrored_in_numpy():
    path = os.path.join(PACKAGE, 'agent', 'models', 'cnn-model.cfg')
    model = build_model(path, IMAGE_SPACE, [Output('policy', 6), Output('value', 1)])
    assert not NumpyForward.supports(model)


@pytest.mark.parametrize('text, message', [
    ('[dense-1]\nunits=8\n[layer-2]\nunits=1\noutput=1\n', '[layer-2]: unknown section'),
    ('[dense-1]\nunits=8\nsize=3\n[dense-2]\noutput=1\n', '[dense-1] size: unknown key'),
    ('[dense-1]\nunits=eight\n[dense-2]\noutput=1\n', '[dense-1] units: expected int'),
    ('[dense-1]\nunits=-4\n[dense-2]\noutput=1\n', '[dense-1] units: expected a positive number'),
    ('[dense-1]\nunits=8\nactivation=sparkle\n[dense-2]\noutput=1\n', '[dense-1] activation: unknown activation'),
    ('[dense-1]\nunits=8\n', 'expected 1 output section(s) (policy), got 0'),
    ('[dense-1]\nunits=8\n[dense-2]\nunits=3\noutput=1\n', '[dense-2] units: expected 2'),
    ('[dense-1]\nactivation=relu\n[dense-2]\noutput=1\n', '[dense-1] units: missing required key'),
    ('[convolutional-1]\nfilters=8\nsize=3\n[flatten-1]\n[dense-1]\noutput=1\n', 'convolutional layers need image'),
    ('[dense-1]\nunits=8\n[dense-2]\nunits=8\ncommon=1\n[dense-3]\noutput=1\n', '[dense-2] common'),
    ('[dense-1]\nunits=8\noutput=maybe\n', '[dense-1] output: expected 0 or 1'),
    ('units=8\n', 'malformed cfg'),
])
def test_bad_cfg_names_file_section_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(CfgError) as error:
        build_model(path, VECTOR_SPACE, [Output('policy', 2)])
    assert str(error.value).startswith(path)
    assert message in str(error.value)


def test_dense_on_images_needs_flatten(tmp_path):
    path = write(tmp_path, '[convolutional-1]\nfilters=4\nsize=8\nstride=4\n[dense-1]\noutput=1\n')
    with pytest.raises(CfgError, match=r'\[dense-1\]: dense layer on image activations'):
        build_model(path, IMAGE_SPACE, [Output('policy', 2)])


def test_missing_cfg_file():
    with pytest.raises(CfgError, match='model file not found: nowhere.cfg'):
        build_model('nowhere.cfg', VECTOR_SPACE, [Output('policy', 2)])


@pytest.mark.parametrize('agent, env_id, files', [
    ('ppo', 'CartPole-v1', ['agent/models/ann-model.cfg']), ('a2c', 'PongNoFrameskip-v4', ['agent/models/cnn-model.cfg']),
    ('td3', 'Pendulum-v1', ['ddpg/models/ann-actor-400-300.cfg', 'td3/models/ann-critic-400-300.cfg']),
])
def test_default_models_fall_back_along_the_class_hierarchy(agent, env_id, files):
    """An agent without its own default cfg for a role uses its base class's (no copies to keep in step)."""
    from xagents.registry import agent_class

    klass = agent_class(agent)
    roles = [role for role in klass.model_roles if not role.startswith('target')]
    space = IMAGE_SPACE if 'Pong' in env_id else VECTOR_SPACE
    resolved = [klass.model_file(klass.__new__(klass), role, space, None) for role in roles]
    assert [os.path.relpath(path, PACKAGE) for path in resolved] == files


@pytest.mark.parametrize('agent_class', ['PPO', 'DQN', 'SAC', 'TD3'])
def test_stacked_vector_observations_are_flattened_for_the_mlp_defaults(agent_class):
    """A Box of rank > 1 that is no image (FrameStackObservation over a vector env: shape (4, n)) gets the MLP
    defaults with its observations flattened; only uint8 height x width x channels Boxes are images."""
    env_id = 'CartPole-v1' if agent_class in ('PPO', 'DQN') else 'Pendulum-v1'
    env = gym.wrappers.FrameStackObservation(gym.make(env_id), 4)
    assert env.observation_space.shape[0] == 4 and not is_image_space(env.observation_space)
    settings = {'buffer_initial_size': 64, 'buffer_batch_size': 32} if agent_class != 'PPO' else {}
    agent = getattr(xagents, agent_class)(env, seed=0, quiet=True, **settings)
    model = agent.models[agent.model_roles[0]]
    observations = np.stack([env.observation_space.sample() for _ in range(5)])
    keras_outputs = [np.asarray(output) for output in tf.nest.flatten(model(observations))]
    for numpy_output, keras_output in zip(agent.forwards[0](observations), keras_outputs):
        np.testing.assert_allclose(numpy_output, keras_output, rtol=1e-5, atol=1e-5)  # the NumPy mirror flattens too
    run = agent.fit(max_steps=512)
    assert run.steps >= 512 and all(np.isfinite(value) for value in run.metrics.values())
    assert agent.predict(observations[0])[0].shape == env.action_space.shape


def test_only_uint8_boxes_of_three_dimensions_are_images():
    assert is_image_space(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))
    assert not is_image_space(gym.spaces.Box(-1, 1, (84, 84, 4), np.float32))
    assert not is_image_space(gym.spaces.Box(0, 255, (4, 4), np.uint8))
    assert not is_image_space(gym.spaces.Box(0, 10, (7, 7, 3), np.uint8))  # ids, not pixels

"""Dict observations: encoders per key, packing, replay per key, normalisation per key, predict, export, every
agent, and the spaces refused."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from xagents import A2C, ACER, DDPG, DQN, PPO, QRDQN, SAC, TD3, TRPO, CrossQ
from xagents.replay.buffer_state import buffer_state, restore_buffer_state
from xagents.replay.buffers import ReplayBuffer
from xagents.envs.creation import EnvError, create_envs
from xagents.networks.models import CfgError, NumpyForward, Output, build_model
from xagents.envs.observations import DictObservations, SmallPictures, holds_grid, is_grid
from xagents.envs.toy_envs import CameraReach
from xagents.utils.quiet_tensorflow import tf


class Sensors(gym.Env):
    """An image, a vector and a Discrete mode; the reward is 1 when the action matches the mode's sign pattern.

    Episodes last 8 steps. ``size`` sets the image side (40 gets the Nature CNN, 6 a flattened input);
    ``box`` gives Box(1) actions (reward: the action's sign matching) instead of Discrete(2).
    """

    def __init__(self, size: int = 6, box: bool = False, bad_key: str | None = None, render_mode=None) -> None:
        self.observation_space = gym.spaces.Dict({
            'camera': gym.spaces.Box(0, 255, (size, size, 1), np.uint8),
            'position': gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            'mode': gym.spaces.Discrete(3, start=1),
        })
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if box else gym.spaces.Discrete(2)
        self.box, self.bad_key, self.t = box, bad_key, 0

    def observation(self):
        observation = self.observation_space.sample()
        if self.bad_key and self.t == 3:
            observation[self.bad_key] = np.full_like(observation[self.bad_key], np.nan)
        self.mode = int(observation['mode'])
        return observation

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation(), {}

    def step(self, action):
        wanted = self.mode % 2
        got = int(np.asarray(action).ravel()[0] > 0) if self.box else int(action)
        self.t += 1
        return self.observation(), float(wanted == got), False, self.t == 8, {}


gym.register('Sensors-v0', entry_point=Sensors)
gym.register('BigSensors-v0', entry_point=Sensors, kwargs={'size': 40})
gym.register('SensorsBox-v0', entry_point=Sensors, kwargs={'box': True})

SMALL = {
    PPO: {'n_steps': 16}, A2C: {}, TRPO: {'n_steps': 32}, ACER: {'buffer_initial_size': 2},
    DQN: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4},
    QRDQN: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4, 'n_quantiles': 4},
    SAC: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4},
    TD3: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4},
    DDPG: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4},
    CrossQ: {'buffer_initial_size': 32, 'buffer_batch_size': 16, 'update_every': 4, 'actor_model': 'ann-actor-64.cfg',
             'critic_model': 'ann-critic-64.cfg'},
}
BOX_ONLY = (TD3, DDPG, CrossQ)


def vector(make) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([make], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def space():
    return Sensors().observation_space


def samples(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    observation_space = space()
    observation_space.seed(seed)
    draws = [observation_space.sample() for _ in range(n)]
    return {key: np.stack([draw[key] for draw in draws]) for key in observation_space.spaces}


def layers_of(model, kind):
    return [layer for layer in model.layers if isinstance(layer, kind)]


# ------------------------------------------------------------------------------------------------ packing
def test_packing_one_hot_encodes_discrete_keys_and_round_trips():
    keys = DictObservations.of(space())
    observations = samples(5)
    packed = keys.pack(observations)
    assert packed.shape == (5, 6 * 6 + 3 + 3) and packed.dtype == np.float32
    mode = keys.keys[keys.names.index('mode')]
    one_hot = packed[:, mode.offset:mode.offset + mode.size]
    np.testing.assert_array_equal(one_hot.argmax(1) + 1, observations['mode'])
    assert (one_hot.sum(1) == 1).all()
    unpacked = keys.unpack(packed)
    for key, value in observations.items():
        np.testing.assert_array_equal(unpacked[key], value)
        assert unpacked[key].dtype == value.dtype


# ------------------------------------------------------------------------------------------------- models
def test_image_keys_get_the_nature_cnn_and_vector_keys_a_flat_input():
    big = gym.make('BigSensors-v0').observation_space
    model = build_model(_packaged_ann(), big, [Output('policy', 2), Output('value', 1)])
    convolutions = layers_of(model, tf.keras.layers.Conv2D)
    assert [(layer.filters, layer.kernel_size[0], layer.strides[0]) for layer in convolutions] == [
        (32, 8, 4), (64, 4, 2), (64, 3, 1)]
    concatenated = layers_of(model, tf.keras.layers.Concatenate)[0]
    # camera: 256 Nature CNN features, mode: 3 one-hot, position: 3
    assert sorted(int(tensor.shape[-1]) for tensor in concatenated.input) == [3, 3, 256]


def test_small_images_are_flattened_since_the_nature_cnn_does_not_fit_them():
    model = build_model(_packaged_ann(), space(), [Output('policy', 2), Output('value', 1)])
    assert not layers_of(model, tf.keras.layers.Conv2D)
    concatenated = layers_of(model, tf.keras.layers.Concatenate)[0]
    assert sorted(int(tensor.shape[-1]) for tensor in concatenated.input) == [3, 3, 36]


class GridOnly(gym.Env):
    """A Box of 7x7x3 uint8 ids, MiniGrid's image alone (``ImgObsWrapper``): reward 1 when the action is the parity
    of the first id."""

    observation_space = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.grid = self.np_random.integers(0, 11, (7, 7, 3), dtype=np.uint8)
        return self.grid, {}

    def step(self, action):
        reward = float(int(action) == self.grid[0, 0, 0] % 2)
        return self.reset()[0], reward, False, True, {}


gym.register('GridOnly-v0', entry_point=GridOnly)


def test_a_small_uint8_image_is_a_grid_of_values_flattened_unscaled_and_normalised_by_default():
    """MiniGrid's 7x7 ids are no intensities: divided by 255, the largest (10) is a 0.04 input and PPO's defaults
    never won a deterministic DoorKey episode. A grid enters as its values, normalised unless told otherwise;
    pictures (36x36 and more) keep the Nature CNN on [0, 1] and are never normalised."""
    agent = PPO.from_env('Sensors-v0', n_envs=2, n_steps=16, seed=0, quiet=True)
    keys = agent.dict_observations
    assert [key.kind for key in keys.keys] == ['grid', 'discrete', 'vector']  # camera, mode, position
    assert agent.observation_stats.mean.shape == (36 + 3,)  # the grid and the position; not the one-hot mode
    assert not layers_of(agent.model, tf.keras.layers.Rescaling) and NumpyForward.supports(agent.model)
    assert NumpyForward(agent.model).scale is not None and (NumpyForward(agent.model).scale == 1).all()
    assert PPO.from_env('Sensors-v0', normalize_observations=False).observation_stats is None
    picture = PPO.from_env('BigSensors-v0')
    assert picture.observation_stats is None and layers_of(picture.model, tf.keras.layers.Conv2D)
    assert [key.kind for key in picture.dict_observations.keys][0] == 'image'

    box = PPO.from_env('GridOnly-v0', n_envs=2, n_steps=16, seed=0, quiet=True)  # no Dict: the same
    assert box.observation_stats.mean.shape == (7, 7, 3)
    assert not layers_of(box.model, tf.keras.layers.Conv2D) and not layers_of(box.model, tf.keras.layers.Rescaling)
    box.fit(max_steps=64)
    grids = box.normalized(np.stack([GridOnly().reset(seed=seed)[0] for seed in range(4)]).astype(np.float32))
    assert (grids < 0).any()  # normalised values, what updates and acting feed the model: no uint8 input
    for mine, keras in zip(NumpyForward(box.model)(grids), box.model(grids)):
        np.testing.assert_allclose(mine, keras.numpy(), rtol=1e-5, atol=1e-6)


def declared(high: int, size: int) -> gym.spaces.Dict:
    """A Dict of a uint8 ``size`` x ``size`` x 3 image whose Box declares ``high``, and a vector."""
    return gym.spaces.Dict({'camera': gym.spaces.Box(0, high, (size, size, 3), np.uint8),
                            'position': gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})


def test_small_images_are_grids_unless_read_as_pictures_and_a_declared_maximum_makes_a_grid_at_any_size():
    """PPO's defaults at 50,000 steps (benchmarks/small_images.py): MiniGrid's DoorKey ids read as pictures never win
    a deterministic episode, a 16x16 camera read as a grid reaches its target far less often than read as a
    picture. So a small [0, 255] image is a grid (MiniGrid declares 255 for its ids) unless SmallPictures reads it as
    a picture, and an image that declares its true maximum below 255 is a grid at any size."""
    kinds = lambda space: [key.kind for key in DictObservations.of(space).keys]  # noqa: E731
    assert kinds(declared(255, 7)) == kinds(declared(255, 16)) == ['grid', 'vector']  # MiniGrid-like, small camera
    assert kinds(declared(255, 40)) == ['image', 'vector']  # a picture: the Nature CNN
    assert kinds(declared(10, 40)) == ['grid', 'vector'] and holds_grid(declared(10, 40))  # ids up to 10, declared
    assert is_grid(gym.spaces.Box(0, 5, (40, 40, 3), np.uint8)) and not is_grid(declared(255, 40)['camera'])
    assert not is_grid(gym.spaces.Box(0, 10, (40, 40, 3), np.float32))  # floats are vectors

    picture = PPO(vector(lambda: gym.wrappers.TransformObservation(
        CameraReach(size=40), lambda obs: obs, declared(255, 40))), n_steps=16, seed=0)
    assert picture.observation_stats is None and layers_of(picture.model, tf.keras.layers.Conv2D)
    ids = PPO(vector(lambda: gym.wrappers.TransformObservation(
        CameraReach(size=40), lambda obs: obs, declared(250, 40))), n_steps=16, seed=0)
    assert ids.observation_stats.mean.shape == (40 * 40 * 3 + 2,) and not layers_of(ids.model, tf.keras.layers.Conv2D)


def test_small_pictures_reads_small_images_as_pictures_scaled_flattened_and_not_normalised():
    """The user's pick wins: SmallPictures makes a small camera float32 intensities in [0, 1], flattened and never
    normalised by default; the grid reading it replaces is normalised."""
    assert PPO(vector(CameraReach), n_steps=16, seed=0).observation_stats is not None  # a grid by default
    agent = PPO(vector(lambda: SmallPictures(CameraReach())), n_steps=16, seed=0)
    space = agent.envs.single_observation_space
    assert space['camera'] == gym.spaces.Box(0.0, 1.0, (16, 16, 3), np.float32) and not holds_grid(space)
    assert agent.observation_stats is None
    assert [key.kind for key in agent.dict_observations.keys] == ['vector', 'vector']
    assert not layers_of(agent.model, tf.keras.layers.Conv2D) and not layers_of(agent.model, tf.keras.layers.Rescaling)
    observation, _ = agent.envs.reset(seed=0)
    raw, _ = CameraReach().reset(seed=0)
    np.testing.assert_allclose(observation['camera'][0], raw['camera'] / 255, rtol=1e-6)
    assert 0.9 < observation['camera'].max() <= 1.0
    agent.fit(max_steps=64)
    assert agent.predict(raw | {'camera': raw['camera'] / np.float32(255)})[0] in range(5)
    box = SmallPictures(GridOnly())  # no Dict: the same
    assert box.observation_space == gym.spaces.Box(0.0, 1.0, (7, 7, 3), np.float32)
    assert box.reset(seed=0)[0].dtype == np.float32 and box.reset(seed=0)[0].max() <= 10 / 255
    with pytest.raises(ValueError, match=r'SmallPictures reads uint8 images in \[0, 255\] smaller than 36 x 36 as '
                                         r'pictures, and .* holds none'):
        SmallPictures(gym.make('BigSensors-v0'))


def test_check_env_says_a_small_grid_holding_intensities_may_be_pictures_and_how_to_read_them_so():
    import xagents

    camera = xagents.check_env(CameraReach(), steps=20)
    assert any(note.startswith("observations under 'camera' are read as a grid, but values up to ") and
               note.endswith('--wrapper xagents.envs.observations:SmallPictures (wrapper=SmallPictures)')
               for note in camera.notes), camera.notes
    for quiet in (xagents.check_env(GridOnly(), steps=20), xagents.check_env(SmallPictures(CameraReach()), steps=20)):
        assert not any('but values up to' in note for note in quiet.notes), quiet.notes
    declared_ids = gym.wrappers.TransformObservation(GridOnly(), lambda obs: obs,
                                                     gym.spaces.Box(0, 10, (7, 7, 3), np.uint8))
    assert any(note.startswith('observations are a grid of values ((7, 7, 3) uint8, at most 10)')
               for note in xagents.check_env(declared_ids, steps=5).notes)


@pytest.mark.parametrize('cfg', ['', '[rescaling-1]\ninput=camera\nscale=25.5\n\n[flatten-1]\ninput=camera\n\n'])
def test_flattened_and_scaled_keys_act_in_numpy_as_in_keras(tmp_path, cfg):
    """Encoders that only flatten and scale make the concatenation the packed vector times a scale per entry:
    acting then runs in NumPy (and updates under XLA), as for a Box MLP."""
    path = tmp_path / 'scaled.cfg'
    path.write_text(cfg + '[dense-1]\nunits=16\nactivation=tanh\n\n[dense-2]\noutput=1\n\n[dense-3]\nunits=1\noutput=1\n')
    model = build_model(str(path), space(), [Output('policy', 2), Output('value', 1)])
    assert NumpyForward.supports(model)
    packed = DictObservations.of(space()).pack(samples(5))
    for mine, keras in zip(NumpyForward(model)(packed), model(packed)):
        np.testing.assert_allclose(mine, keras.numpy(), rtol=1e-5, atol=1e-6)
    big = build_model(_packaged_ann(), gym.make('BigSensors-v0').observation_space, [Output('q', 2), Output('v', 1)])
    assert not NumpyForward.supports(big)  # a Nature CNN: acting runs the Keras model


def test_a_cfg_gives_a_key_its_own_layers(tmp_path):
    path = tmp_path / 'dict.cfg'
    path.write_text('[convolutional-1]\ninput=camera\nfilters=5\nsize=3\nactivation=relu\n\n'
                    '[flatten-1]\ninput=camera\n\n[dense-1]\ninput=position\nunits=7\n\n'
                    '[dense-2]\nunits=16\ncommon=1\n\n[dense-3]\noutput=1\n')
    model = build_model(str(path), space(), [Output('q', 2)])
    (convolution,) = layers_of(model, tf.keras.layers.Conv2D)
    assert convolution.filters == 5 and convolution.kernel_size == (3, 3)
    concatenated = layers_of(model, tf.keras.layers.Concatenate)[0]
    assert sorted(int(tensor.shape[-1]) for tensor in concatenated.input) == [3, 7, 4 * 4 * 5]
    assert model(DictObservations.of(space()).pack(samples(4))).shape == (4, 2)


@pytest.mark.parametrize('text, message', [
    ('[dense-1]\ninput=speed\nunits=4\n', r"\[dense-1\] input: unknown observation key 'speed', expected one of: camera mode position"),
    ('[dense-1]\nunits=4\n\n[dense-2]\ninput=position\nunits=4\n', r'\[dense-2\] input: the layers of each key .* follow'),
    ('[convolutional-1]\ninput=position\nfilters=2\nsize=2\n', r"\[convolutional-1\] input: convolutional layers need an image key"),
    ('[dense-1]\ninput=camera\nunits=4\n', r'\[dense-1\]: dense layer on image activations: add a \[flatten-N\]'),
    ('[convolutional-1]\ninput=camera\nfilters=2\nsize=2\n', r"\[convolutional-1\]: the layers of 'camera' must end flat"),
    ('[convolutional-1]\nfilters=2\nsize=2\n\n[flatten-1]\n', r'convolutional layers on Dict observations belong to an image key'),
])
def test_a_bad_key_section_names_its_file_section_and_key(tmp_path, text, message):
    path = tmp_path / 'bad.cfg'
    path.write_text(text + '\n[dense-9]\noutput=1\n')
    with pytest.raises(CfgError, match=rf'{path}: .*{message}'):
        build_model(str(path), space(), [Output('q', 2)])


def test_input_on_box_observations_is_refused(tmp_path):
    path = tmp_path / 'box.cfg'
    path.write_text('[dense-1]\ninput=camera\nunits=4\n\n[dense-2]\noutput=1\n')
    with pytest.raises(CfgError, match=r'\[dense-1\] input: input names a key of Dict observations'):
        build_model(str(path), gym.spaces.Box(-1, 1, (3,)), [Output('q', 2)])


def _packaged_ann():
    import importlib.resources
    return str(importlib.resources.files('xagents').joinpath('agent', 'models', 'ann-model.cfg'))


# ------------------------------------------------------------------------------------------------ buffers
def test_replay_stores_every_key_apart_in_its_dtype_and_samples_what_was_added():
    keys = DictObservations.of(space())
    buffer = ReplayBuffer(64, 2, space(), gym.spaces.Discrete(2), seed=0)
    parts = buffer._store.parts
    assert parts['camera'].data.dtype == np.uint8 and parts['camera'].data.shape[2:] == (6, 6, 1)
    assert parts['mode'].data.dtype == np.int64 and parts['position'].data.dtype == np.float32
    stream = keys.pack(samples(22)).reshape(11, 2, -1)  # (time, env, packed)
    for t in range(10):
        buffer.add(stream[t], np.array([0, 1]), np.array([t, t], np.float32), stream[t + 1],
                   np.zeros(2, bool), np.zeros(2, bool))
    batch = buffer.sample(16)
    added = {stream[t, env].tobytes(): (t, env) for t in range(11) for env in range(2)}
    for observation, next_observation in zip(batch.observations, batch.next_observations):
        t, env = added[observation.tobytes()]  # every sampled observation is one that was added, whole
        assert next_observation.tobytes() == stream[t + 1, env].tobytes()

    restored = ReplayBuffer(64, 2, space(), gym.spaces.Discrete(2), seed=1)
    restore_buffer_state(restored, buffer_state(buffer))
    assert any(key.startswith('_store.parts.camera/') for key in buffer_state(buffer))
    for name in parts:
        np.testing.assert_array_equal(restored._store.parts[name].data, parts[name].data)
    again, expected = restored.sample(16), buffer.sample(16)
    np.testing.assert_array_equal(again.observations, expected.observations)


def test_stacked_image_keys_store_each_frame_once():
    stacked = gym.spaces.Dict({'frames': gym.spaces.Box(0, 255, (5, 5, 3), np.uint8),
                               'speed': gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
    keys = DictObservations.of(stacked)
    whole = ReplayBuffer(40, 1, stacked, gym.spaces.Discrete(2), seed=0)
    deduplicated = ReplayBuffer(40, 1, stacked, gym.spaces.Discrete(2), seed=0, frame_stack_axis=-1)
    assert deduplicated._store.parts['frames'].frames.nbytes * 3 == whole._store.parts['frames'].data.nbytes
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (12, 5, 5), np.uint8)
    stacks = [np.stack([frames[max(0, t - k)] for k in (2, 1, 0)], -1) for t in range(12)]  # reset-padded
    observations = [keys.pack({'frames': stack[None], 'speed': np.full((1, 2), t / 12, np.float32)})
                    for t, stack in enumerate(stacks)]
    for buffer in (whole, deduplicated):
        for t in range(11):
            buffer.add(observations[t], np.array([0]), np.array([1.0], np.float32), observations[t + 1],
                       np.zeros(1, bool), np.zeros(1, bool))
    np.testing.assert_array_equal(deduplicated.sample(8).observations, whole.sample(8).observations)


# ------------------------------------------------------------------------------------------ normalisation
def test_normalisation_scales_vector_keys_and_grids_only():
    assert PPO.from_env('BigSensors-v0', normalize_observations=True).observation_stats.mean.shape == (3,)  # a picture
    agent = PPO.from_env('Sensors-v0', n_envs=2, n_steps=16, seed=0, normalize_observations=True, quiet=True,
                         observation_keys=['mode', 'position'])
    keys = agent.dict_observations
    assert agent.observation_stats.mean.shape == (3,)  # position only: no one-hot
    agent.fit(max_steps=64)
    packed = keys.pack(samples(6))
    normalized = agent.normalized(packed)
    position = keys.keys[keys.names.index('position')]
    changed = ~np.isclose(normalized, packed).all(0)
    assert changed[position.offset:position.offset + position.size].all()
    assert not changed[:position.offset].any() and not changed[position.offset + position.size:].any()
    np.testing.assert_allclose(agent.normalized_graph(tf.constant(packed)).numpy(), normalized, atol=1e-5)


def test_normalising_a_dict_without_vector_keys_is_refused():
    with pytest.raises(ValueError, match='normalize_observations scales vector \\(Box\\) keys and small uint8 grids'):
        PPO.from_env('BigSensors-v0', observation_keys=['camera', 'mode'], normalize_observations=True)


# ---------------------------------------------------------------------------- predict, export, save/load
@pytest.fixture(scope='module')
def trained():
    agent = PPO.from_env('Sensors-v0', n_envs=2, n_steps=16, seed=0, normalize_observations=True, quiet=True)
    agent.fit(max_steps=64)
    return agent


def test_predict_takes_one_observation_or_a_batch(trained):
    observations = samples(5, seed=3)
    batch = trained.predict(observations)[0]
    assert batch.shape == (5,)
    for i in range(5):
        assert trained.predict({key: value[i] for key, value in observations.items()})[0] == batch[i]
    with pytest.raises(ValueError, match="expected observation 'position' shaped \\(3,\\)"):
        trained.predict({**observations, 'position': np.zeros((5, 4))})
    with pytest.raises(ValueError, match='expected a dict of arrays with keys'):
        trained.predict({'camera': observations['camera']})


@pytest.mark.parametrize('format', ['saved_model', 'tflite', 'onnx'])
def test_export_takes_one_named_input_per_key_and_equals_predict(trained, tmp_path, format):
    from xagents.storage.export import load_exported
    if format == 'onnx':
        pytest.importorskip('tf2onnx')
        pytest.importorskip('onnxruntime')
    if format == 'tflite':
        pytest.importorskip('ai_edge_litert')
    path = trained.export(str(tmp_path / f'policy.{format}'), format)
    observations = samples(7, seed=4)
    np.testing.assert_array_equal(load_exported(path, format)(observations), trained.predict(observations)[0])
    if format == 'onnx':
        import onnxruntime
        names = [each.name for each in onnxruntime.InferenceSession(path).get_inputs()]
        assert sorted(names) == ['camera', 'mode', 'position']


@pytest.mark.backends
def test_save_and_load_keep_the_policy_and_statistics(trained, tmp_path):
    trained.save(str(tmp_path / 'agent'))
    loaded = PPO.load(str(tmp_path / 'agent'))
    observations = samples(6, seed=5)
    np.testing.assert_array_equal(loaded.predict(observations)[0], trained.predict(observations)[0])
    np.testing.assert_array_equal(loaded.observation_stats.mean, trained.observation_stats.mean)
    assert loaded.evaluate(2).returns.shape == (2,)


def test_play_and_resume_on_dict_observations(trained, tmp_path):
    games = trained.play(episodes=2, seed=1)
    assert len(games.returns) == 2 and (games.lengths == 8).all()
    trained.save(str(tmp_path / 'resume'))
    resumed = PPO.load(str(tmp_path / 'resume'))
    steps = resumed.steps
    resumed.fit(max_steps=32, quiet=True)
    assert resumed.steps == steps + 32


def test_acers_segments_store_every_key_apart_and_replay_each_env_column_whole():
    from xagents.replay.segments import SegmentBuffer, TrajectorySegment

    keys = DictObservations.of(space())
    buffer = SegmentBuffer(4, 5, 2, keys.space, gym.spaces.Discrete(2), seed=0, keys=keys)
    parts = buffer.observation_store.parts
    assert parts['camera'].data.dtype == np.uint8 and parts['mode'].data.dtype == np.int64
    packed_floats = SegmentBuffer(4, 5, 2, keys.space, gym.spaces.Discrete(2)).nbytes
    assert buffer.nbytes < packed_floats / 2  # the 6x6 image as bytes, not float32
    segments = []
    for index in range(3):
        observations = keys.pack(samples(12)).reshape(6, 2, -1)
        segment = TrajectorySegment(observations, np.full((5, 2), index), np.zeros((5, 2), np.float32),
                                    np.zeros((5, 2), np.float32), np.full((5, 2, 2), 0.5, np.float32))
        buffer.add(segment)
        segments.append(segment)
    sampled = buffer.sample()
    assert sampled.observations.shape == (6, 2, keys.size) and sampled.observations.dtype == np.float32
    for env in range(2):
        source = segments[int(sampled.actions[0, env])]  # the segment this column came from, all of it
        np.testing.assert_array_equal(sampled.observations[:, env], source.observations[:, env])

    restored = SegmentBuffer(4, 5, 2, keys.space, gym.spaces.Discrete(2), seed=1, keys=keys)
    restore_buffer_state(restored, buffer_state(buffer))
    for name, part in parts.items():
        np.testing.assert_array_equal(restored.observation_store.parts[name].data, part.data)
    np.testing.assert_array_equal(restored.sample().observations, buffer.sample().observations)


def test_a_saved_acer_keeps_its_segments_per_key(tmp_path):
    agent = ACER.from_env('Sensors-v0', n_envs=2, seed=0, quiet=True, **SMALL[ACER])
    agent.fit(max_steps=96)
    agent.save(str(tmp_path / 'acer'), include_buffer=True)
    loaded = ACER.load(str(tmp_path / 'acer'))
    assert len(loaded.buffer) == len(agent.buffer) > 0
    for name, part in agent.buffer.observation_store.parts.items():
        np.testing.assert_array_equal(loaded.buffer.observation_store.parts[name].data, part.data)
    assert loaded.buffer.observation_store.parts['camera'].data.dtype == np.uint8


def test_a_saved_replay_buffer_of_dict_observations_comes_back_per_key(tmp_path):
    agent = DQN.from_env('Sensors-v0', n_envs=2, seed=0, quiet=True, **SMALL[DQN])
    agent.fit(max_steps=64)
    agent.save(str(tmp_path / 'dqn'), include_buffer=True)
    loaded = DQN.load(str(tmp_path / 'dqn'))
    assert loaded.buffer.steps == agent.buffer.steps == 64
    for name, part in agent.buffer._store.parts.items():
        np.testing.assert_array_equal(loaded.buffer._store.parts[name].data, part.data)
    assert loaded.buffer._store.parts['camera'].data.dtype == np.uint8


# ------------------------------------------------------------------------------------------- every agent
@pytest.mark.backends
@pytest.mark.parametrize('agent_class', list(SMALL), ids=lambda agent_class: agent_class.__name__)
def test_every_agent_trains_on_dict_observations(agent_class):
    env = 'SensorsBox-v0' if agent_class in BOX_ONLY else 'Sensors-v0'
    agent = agent_class.from_env(env, n_envs=2, seed=0, quiet=True, **SMALL[agent_class])
    before = [weight.copy() for weight in agent.models[agent.model_roles[0]].get_weights()]
    agent.fit(max_steps=96)
    after = agent.models[agent.model_roles[0]].get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(before, after)), 'no weight changed'
    actions = agent.predict(samples(3))[0]
    assert len(actions) == 3


def test_sac_with_box_actions_gives_its_critic_the_action_as_one_more_key():
    agent = SAC.from_env('SensorsBox-v0', n_envs=2, seed=0, quiet=True, **SMALL[SAC])
    agent.fit(max_steps=96)
    critic = agent.models['critic']
    assert int(critic.inputs[0].shape[-1]) == agent.dict_observations.size + 1
    assert any(layer.name == 'action_input' for layer in critic.layers)


def test_async_envs_give_dict_observations_too():
    agent = DQN.from_env('Sensors-v0', n_envs=2, async_envs=True, seed=0, quiet=True, **SMALL[DQN])
    try:
        agent.fit(max_steps=64)
    finally:
        agent.envs.close()
    assert agent.buffer.steps == 64


# -------------------------------------------------------------------------------------------- refused
@pytest.mark.parametrize('inner, message', [
    (gym.spaces.Dict({'x': gym.spaces.Box(-1, 1, (2,))}), "a nested Dict under 'inner'"),
    (gym.spaces.Tuple([gym.spaces.Discrete(2)]), "a nested Tuple under 'inner'"),
    (gym.spaces.Text(5), "got Text under 'inner': drop it with observation_keys"),
])
def test_nested_and_unencodable_keys_are_refused_in_one_line(inner, message):
    class Nested(gym.Env):
        observation_space = gym.spaces.Dict({'inner': inner, 'position': gym.spaces.Box(-1, 1, (2,))})
        action_space = gym.spaces.Discrete(2)

    for agent_class in (PPO, DQN):
        with pytest.raises(ValueError, match=message) as error:
            agent_class(vector(Nested))
        assert '\n' not in str(error.value)


def test_tuple_observations_are_refused_in_one_line():
    class Pair(gym.Env):
        observation_space = gym.spaces.Tuple([gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)])
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match='PPO expects Box or Dict observations'):
        PPO(vector(Pair))


def test_a_keras_model_on_dict_observations_is_refused():
    model = tf.keras.Sequential([tf.keras.Input((42,)), tf.keras.layers.Dense(2)])
    envs = vector(Sensors)
    with pytest.raises(ValueError, match="DQN's model: Dict observations need a .cfg model"):
        DQN(envs, model=model)


def test_a_non_finite_key_is_named():
    agent = PPO.from_env('Sensors-v0', n_envs=1, n_steps=8, seed=0, quiet=True,
                         env_kwargs={'bad_key': 'position'})
    with pytest.raises(EnvError, match=r"non-finite observation\['position'\]\[0\] \(nan\) in env 0"):
        agent.fit(max_steps=16)


def test_observation_keys_picks_keys_and_refuses_unknown_ones():
    agent = PPO.from_env('Sensors-v0', n_envs=1, observation_keys=['camera', 'mode'], quiet=True)
    assert list(agent.envs.single_observation_space.spaces) == ['camera', 'mode']
    with pytest.raises(ValueError, match="Sensors-v0 observes no key 'speed': expected some of camera, mode, position"):
        PPO.from_env('Sensors-v0', observation_keys=['speed'])
    with pytest.raises(ValueError, match='observation_keys picks keys of Dict observations'):
        PPO.from_env('CartPole-v1', observation_keys=['x'])


@pytest.mark.parametrize('agent_class', [DQN], ids=lambda agent_class: agent_class.__name__)
def test_ray_workers_collect_dict_observations(agent_class):
    pytest.importorskip('ray')
    env = 'xagents.tests.test_dict_observations:Sensors-v0'  # workers import the module that registers it
    agent = agent_class.from_env(env, n_envs=2, workers=2, seed=0, quiet=True, **SMALL[agent_class])
    run = agent.fit(max_steps=128)
    assert agent.steps >= 128 and run.history is not None
    if agent_class is DQN:
        assert agent.buffer.steps >= 64


@pytest.mark.backends
@pytest.mark.parametrize('agent_class, env, settings, steps', [
    (DQN, 'Sensors-v0', {'buffer_initial_size': 200, 'buffer_batch_size': 32, 'update_every': 2, 'lr': 1e-3,
                         'epsilon_decay_steps': 2000, 'target_update_interval': 100}, 4000),
], ids=['DQN'])
def test_off_policy_agents_learn_which_action_a_discrete_key_asks_for(agent_class, env, settings, steps):
    """The reward is 1 when the action matches the ``mode`` key's parity: random actions score 4 of 8 per episode,
    and only reading that key through its one-hot encoder (stored in replay by index) gets near 8."""
    agent = agent_class.from_env(env, n_envs=2, seed=0, quiet=True, observation_keys=['mode', 'position'], **settings)
    agent.fit(max_steps=steps)  # (without the camera: normalised by default, its noise only slows this down)
    assert agent.evaluate(20).returns.mean() >= 7.5


class DictCartPole(gym.ObservationWrapper):
    """CartPole-v1 observing ``{'cart': (x, x'), 'pole': (theta, theta')}``: packed, the Box's own vector."""

    def __init__(self, render_mode=None):
        super().__init__(gym.make('CartPole-v1', render_mode=render_mode))
        low, high = self.env.observation_space.low, self.env.observation_space.high
        self.observation_space = gym.spaces.Dict({'cart': gym.spaces.Box(low[:2], high[:2]),
                                                  'pole': gym.spaces.Box(low[2:], high[2:])})

    def observation(self, observation):
        return {'cart': observation[:2], 'pole': observation[2:]}


gym.register('DictCartPole-v1', entry_point=DictCartPole, max_episode_steps=500)


@pytest.mark.backends
@pytest.mark.parametrize('agent_class', [PPO, DQN], ids=lambda agent_class: agent_class.__name__)
def test_a_dict_of_vector_keys_learns_exactly_as_the_box_it_splits(agent_class):
    """Flattened keys concatenate to the packed vector, which is the Box's vector here: same seed, same
    weights after training, with observation normalisation (per key) too."""
    weights = []
    for env in ('CartPole-v1', 'DictCartPole-v1'):  # (no presets: the same hyperparameters for both)
        agent = agent_class(create_envs(env, n_envs=2, seed=0), seed=0, normalize_observations=True,
                            **SMALL[agent_class])
        agent.fit(max_steps=128, quiet=True)
        weights.append(agent.models[agent.model_roles[0]].get_weights())
    for box, packed in zip(*weights):
        np.testing.assert_allclose(packed, box, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('agent_class', [PPO, DQN], ids=lambda agent_class: agent_class.__name__)
def test_an_image_key_trains_through_the_nature_cnn_and_exports_as_predict(agent_class, tmp_path):
    """A 40 x 40 image key gets the Nature CNN: acting runs the Keras model, the update trains the CNN, and
    the SavedModel equals predict."""
    from xagents.storage.export import load_exported

    agent = agent_class.from_env('BigSensors-v0', n_envs=2, seed=0, quiet=True, **SMALL[agent_class])
    model = agent.models[agent.model_roles[0]]
    (first, *_) = layers_of(model, tf.keras.layers.Conv2D)
    before = first.get_weights()[0].copy()
    agent.fit(max_steps=96)
    assert not np.array_equal(first.get_weights()[0], before)
    big = gym.make('BigSensors-v0').observation_space
    big.seed(0)
    draws = [big.sample() for _ in range(5)]
    observations = {key: np.stack([draw[key] for draw in draws]) for key in big.spaces}
    path = agent.export(str(tmp_path / 'policy'), 'saved_model')
    np.testing.assert_array_equal(load_exported(path)(observations), agent.predict(observations)[0])


def test_a_non_finite_final_observation_is_named_by_its_key():
    class LastNaN(Sensors):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            if truncated:
                observation['position'] = np.full(3, np.inf, np.float32)
            return observation, reward, terminated, truncated, info

    agent = PPO(vector(lambda: gym.wrappers.TimeLimit(LastNaN(), 20)), n_steps=8, seed=0)
    with pytest.raises(EnvError, match=r"non-finite observation\['position'\]\[0\] \(inf\) in env 0 at env step 8"):
        agent.fit(max_steps=16, quiet=True)

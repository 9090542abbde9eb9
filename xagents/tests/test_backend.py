"""xagents.backend, on whichever Keras backend runs the tests (``KERAS_BACKEND``): a compiled update equals the
same code run eagerly, differentiation agrees with finite differences, variables assigned inside loops and branches
keep what they were given, and the backends compute the same numbers from the same weights."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from xagents import backend

pytestmark = pytest.mark.backends

RNG = np.random.default_rng(0)
PACKAGE = os.path.dirname(os.path.dirname(__file__))


def gym_box(shape: tuple, dtype=np.float32):
    import gymnasium as gym
    return gym.spaces.Box(0, 255, shape, dtype) if dtype == np.uint8 else gym.spaces.Box(-1, 1, shape, dtype)

X = RNG.normal(size=(16, 3)).astype(np.float32)
Y = RNG.normal(size=(16, 1)).astype(np.float32)
WEIGHTS = [RNG.normal(size=(3, 5)).astype(np.float32) * 0.5, RNG.normal(size=5).astype(np.float32) * 0.1,
           RNG.normal(size=(5, 1)).astype(np.float32) * 0.5, np.zeros(1, np.float32)]


def setup() -> tuple:
    """A small model with fixed weights, its built Adam, a seeded random stream and a step counter."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5, activation='tanh'), keras.layers.Dense(1)])
    model.set_weights(WEIGHTS)
    optimizer = keras.optimizers.Adam(0.05)
    optimizer.build(model.trainable_variables)
    return model, optimizer, keras.random.SeedGenerator(7), keras.Variable(0, dtype='int32', trainable=False)


def update(model, optimizer, seed, counter, x, y) -> dict:
    """Gradient steps in a loop until the loss falls below half the first one (at most 6), each counted; a
    branch that assigns; a random draw."""
    def loss():
        predictions = model(x)
        value = ops.mean((predictions - y) ** 2)
        return value, predictions

    def step(i, first, last):
        (value, _), gradients = backend.value_and_grad(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        counter.assign(counter + 1)
        return i + 1, ops.where(i == 0, value, first), value

    _, first, last = backend.while_loop(lambda i, first, last: ops.logical_and(i < 6, ops.logical_or(i == 0, last > 0.5 * first)),
                                        step, (ops.convert_to_tensor(0), ops.convert_to_tensor(0.0),
                                               ops.convert_to_tensor(0.0)))
    backend.cond(last < first, lambda: counter.assign(counter + 100), lambda: counter.assign(counter - 100))
    return {'first': first, 'last': last, 'noise': keras.random.uniform((3,), seed=seed)}


def state(model, optimizer, seed, counter) -> list[np.ndarray]:
    return [ops.convert_to_numpy(variable) for variable in model.variables + optimizer.variables
            + [seed.state, counter]]


def test_a_compiled_update_equals_the_same_code_run_eagerly():
    eager, compiled = setup(), setup()
    run = backend.compiled(lambda x, y: update(*compiled, x, y),
                           lambda: compiled[0].variables + compiled[1].variables + [compiled[2].state, compiled[3]])
    for _ in range(2):
        expected, got = update(*eager, ops.convert_to_tensor(X), ops.convert_to_tensor(Y)), run(X, Y)
        for name in expected:
            np.testing.assert_allclose(ops.convert_to_numpy(got[name]), ops.convert_to_numpy(expected[name]),
                                       rtol=1e-5, atol=1e-6, err_msg=name)
    for want, have in zip(state(*eager), state(*compiled)):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)
    steps = int(ops.convert_to_numpy(compiled[3])) % 100
    assert 2 <= steps <= 12 and int(ops.convert_to_numpy(compiled[3])) == steps + 200  # the loop's steps, the branch
    assert int(ops.convert_to_numpy(compiled[1].iterations)) == steps


def test_the_random_stream_advances_across_compiled_calls():
    model, optimizer, seed, counter = setup()
    run = backend.compiled(lambda x, y: update(model, optimizer, seed, counter, x, y),
                           lambda: model.variables + optimizer.variables + [seed.state, counter])
    first, second = (ops.convert_to_numpy(run(X, Y)['noise']) for _ in range(2))
    assert not np.allclose(first, second)


def flat_gradient(model, values: np.ndarray) -> np.ndarray:
    for variable, value in zip(model.trainable_variables, unflatten(model, values)):
        variable.assign(value)
    (_, _), gradients = backend.value_and_grad(lambda: (ops.mean((model(X) - ops.convert_to_tensor(Y)) ** 2), None),
                                               model.trainable_variables)
    return np.concatenate([ops.convert_to_numpy(gradient).ravel() for gradient in gradients])


def unflatten(model, values: np.ndarray) -> list[np.ndarray]:
    parts, start = [], 0
    for variable in model.trainable_variables:
        size = int(np.prod(variable.shape))
        parts.append(values[start:start + size].reshape(variable.shape))
        start += size
    return parts


def test_the_hessian_vector_product_is_the_change_of_the_gradient():
    model = setup()[0]
    theta = np.concatenate([weight.ravel() for weight in WEIGHTS]).astype(np.float64)
    vector = RNG.normal(size=theta.size)
    product = ops.convert_to_numpy(backend.hvp(lambda: ops.mean((model(X) - ops.convert_to_tensor(Y)) ** 2),
                                               model.trainable_variables,
                                               ops.convert_to_tensor(vector.astype(np.float32))))
    h = 1e-2  # central differences of the gradient along the vector
    expected = (flat_gradient(model, (theta + h * vector).astype(np.float32))
                - flat_gradient(model, (theta - h * vector).astype(np.float32))) / (2 * h)
    np.testing.assert_allclose(product, expected, rtol=2e-2, atol=2e-3)
    assert np.abs(product).max() > 1e-2


def test_the_vector_jacobian_product_pulls_the_cotangent_back():
    matrix = RNG.normal(size=(4, 3)).astype(np.float32)
    primal = RNG.normal(size=(2, 3)).astype(np.float32)
    cotangent = RNG.normal(size=(2, 4)).astype(np.float32)
    output, pulled = backend.vjp(lambda p: ops.tanh(ops.matmul(p, ops.transpose(matrix))),
                                 ops.convert_to_tensor(primal), ops.convert_to_tensor(cotangent))
    z = primal @ matrix.T
    np.testing.assert_allclose(ops.convert_to_numpy(output), np.tanh(z), rtol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(pulled), (cotangent * (1 - np.tanh(z) ** 2)) @ matrix,
                               rtol=1e-4, atol=1e-6)


SAME_NUMBERS = """
import json, sys
sys.path.insert(0, {tests!r})
from test_backend import X, Y, setup, update, state
from keras import ops
parts = setup()
out = update(*parts, ops.convert_to_tensor(X), ops.convert_to_tensor(Y))
print(json.dumps({{'first': float(ops.convert_to_numpy(out['first'])), 'last': float(ops.convert_to_numpy(out['last'])),
                  'weights': [w.ravel().tolist() for w in state(*parts)[:4]]}}))
"""


@pytest.mark.skipif(keras.backend.backend() != 'tensorflow', reason='compares the other backends from the TensorFlow run')
def test_every_backend_computes_the_same_update_from_the_same_weights():
    script = SAME_NUMBERS.format(tests=os.path.dirname(__file__))
    results = {}
    for name in backend.BACKENDS:
        child = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300,
                               env={**os.environ, 'KERAS_BACKEND': name})
        assert child.returncode == 0, child.stderr[-2000:]
        results[name] = json.loads(child.stdout.strip().splitlines()[-1])
    tensorflow = results.pop('tensorflow')
    assert tensorflow['last'] < tensorflow['first'] and set(results) == {'jax', 'torch'}
    for other in results.values():
        np.testing.assert_allclose(other['first'], tensorflow['first'], rtol=1e-5)
        np.testing.assert_allclose(other['last'], tensorflow['last'], rtol=1e-4)
        for a, b in zip(other['weights'], tensorflow['weights']):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _keras_call(model, inputs, training):
    """What Keras computes through the model's layers, bypassing the direct path."""
    return keras.tree.flatten(keras.Model.__call__(model, inputs, training=training))


def _numpy(structure) -> list[np.ndarray]:
    return [ops.convert_to_numpy(ops.stop_gradient(x)) for x in keras.tree.flatten(structure)]


DIRECT_CASES = {  # a cfg, its space, the outputs asked, and options
    'two towers, gSDE features': ('agent/models/ann-model.cfg', gym_box((6,)), (3, 1), {'features': True}),
    'flattened (3, 4) input': ('agent/models/ann-model.cfg', gym_box((3, 4)), (2, 1), {}),
    'uint8 vector scaled 1/255': ('dqn/models/ann-model.cfg', gym_box((5,), np.uint8), (4,), {}),
    'SimBa residual blocks': ('sac/models/ann-critic-simba.cfg', gym_box((5,)), (1, 1), {}),
    'batch renormalisation': ('crossq/models/ann-critic.cfg', gym_box((5,)), (1, 1), {'batch_renorm': {}, 'repeat_head': True}),
    'Dict observations': ('agent/models/ann-model.cfg', 'dict', (2, 1), {}),
}


@pytest.mark.parametrize('case', DIRECT_CASES)
def test_a_cfg_mlp_computes_directly_what_keras_computes_through_its_layers(case):
    # Small cfg MLPs skip Keras' per-layer call machinery (on PyTorch it cost more than the maths): their outputs,
    # gradients and batch-renormalisation statistics must be Keras' own, in training mode and out of it.
    import gymnasium as gym
    from xagents.networks.models import Output, build_model, direct_forward

    path, space, units, options = DIRECT_CASES[case]
    if space == 'dict':
        space = gym.spaces.Dict({'position': gym.spaces.Box(-1, 1, (3,), np.float32), 'heading': gym.spaces.Discrete(4)})
    model = build_model(os.path.join(PACKAGE, path), space, [Output(f'out{i}', n) for i, n in enumerate(units)],
                        **options)
    assert direct_forward(model) is not None
    size = model.inputs[0].shape[1:]
    x = RNG.uniform(0, 255 if space.dtype == np.uint8 else 1, (8, *size)).astype(model.inputs[0].dtype)
    for training in (False, True):
        before = _numpy(model.variables)
        want = _numpy(_keras_call(model, x, training))
        keras_state = _numpy(model.variables)
        for variable, value in zip(model.variables, before):
            variable.assign(value)
        got = _numpy(model(x, training=training))
        assert model._direct is not None and len(got) == len(want) == len(units) + options.get('features', 0)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(_numpy(model.variables), keras_state):  # batch renormalisation's statistics move alike
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    def loss(call):
        return lambda: (sum(ops.sum(output * (i + 1)) for i, output in enumerate(keras.tree.flatten(call()))), 0)

    weights = _numpy(model.variables)
    (_, _), direct = backend.value_and_grad(loss(lambda: model(x)), model.trainable_variables)
    for variable, value in zip(model.variables, weights):
        variable.assign(value)
    (_, _), through_keras = backend.value_and_grad(loss(lambda: _keras_call(model, x, None)),
                                                   model.trainable_variables)
    assert any(np.abs(g).max() > 0 for g in _numpy(direct))
    for a, b in zip(_numpy(direct), _numpy(through_keras)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_target_network_computes_directly_with_its_own_weights():
    from xagents import DQN
    from xagents.networks.models import CfgModel

    agent = DQN.from_env('CartPole-v1', seed=0, quiet=True)
    target, online = agent.target_model, agent.model
    assert isinstance(target, CfgModel)
    online.layers[-1].kernel.assign(online.layers[-1].kernel + 1)  # the target must not follow it
    x = RNG.normal(size=(4, 4)).astype(np.float32)
    got, want = _numpy(target(x)), _numpy(_keras_call(target, x, False))
    assert target._direct is not None
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[0], _numpy(online(x))[0])


def test_recurrent_bf16_and_convolutional_models_go_through_keras():
    import gymnasium as gym
    from xagents.networks.models import Output, build_model, direct_forward

    vector = gym.spaces.Box(-1, 1, (4,), np.float32)
    models = [
        build_model(os.path.join(PACKAGE, 'agent/models/ann-model-recurrent.cfg'), vector, [Output('a', 2), Output('v', 1)],
                    recurrent='lstm'),
        build_model(os.path.join(PACKAGE, 'agent/models/ann-model.cfg'), vector, [Output('a', 2), Output('v', 1)],
                    precision='bf16'),
        build_model(os.path.join(PACKAGE, 'dqn/models/cnn-model.cfg'), gym.spaces.Box(0, 255, (84, 84, 4), np.uint8),
                    [Output('q', 4)]),
    ]
    assert [direct_forward(model) for model in models] == [None, None, None]


@pytest.mark.skipif(keras.backend.backend() == 'tensorflow', reason='TensorFlow exports in its own process')
def test_an_agent_on_another_backend_exports_through_tensorflow_what_it_predicts(tmp_path):
    """JAX's exports, and PyTorch's SavedModel and TFLite, come from a TensorFlow process that loads a save."""
    from xagents import PPO
    from xagents.storage.export import load_exported

    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True)
    agent.fit(max_steps=2048)
    observations = RNG.normal(size=(32, 4)).astype(np.float32)
    format = 'onnx' if keras.backend.backend() == 'jax' else 'saved_model'
    path = agent.export(str(tmp_path / 'policy'), format)
    with pytest.raises(ValueError, match='already exists'):  # the TensorFlow process's refusal, as it gave it
        agent.export(path, format)
    np.testing.assert_array_equal(load_exported(path, format)(observations), agent.predict(observations)[0])


def torch_export_cases():
    """Agents whose ONNX export covers each part of a policy's graph: the normaliser, Box scaling, dueling heads,
    masks on Discrete observations, MultiDiscrete actions, Dict keys, a memory."""
    import gymnasium as gym

    from xagents import DQN, PPO, SAC
    from xagents.envs import toy_envs  # noqa: F401 (MatchTargets-v0)

    def dict_env():
        inner = gym.make('CartPole-v1')
        return gym.wrappers.TransformObservation(
            inner, lambda observation: {'position': observation[:2], 'level': np.int64(observation[0] > 0)},
            gym.spaces.Dict({'position': gym.spaces.Box(-5, 5, (2,), np.float32), 'level': gym.spaces.Discrete(2)}))

    return {
        'normalised': lambda: PPO.from_env('CartPole-v1', seed=0, quiet=True, normalize_observations=True),
        'box': lambda: SAC.from_env('Pendulum-v1', seed=0, quiet=True, buffer_initial_size=128,
                                    buffer_batch_size=64, normalize_observations=True),
        'dueling': lambda: DQN.from_env('CartPole-v1', seed=0, quiet=True, dueling=True, buffer_initial_size=128),
        'masked': lambda: PPO.from_env('Taxi-v4', seed=0, quiet=True, n_envs=2),
        'multi-discrete': lambda: PPO.from_env('MatchTargets-v0', seed=0, quiet=True, n_envs=2,
                                               env_kwargs={'action_type': 'multi_discrete'}),
        'dict': lambda: PPO(dict_env(), seed=0, quiet=True, n_steps=64),
        'recurrent': lambda: PPO.from_env('CartPoleNoVel-v1', seed=0, quiet=True, n_envs=2, n_steps=16,
                                          recurrent='lstm', normalize_observations=True),
    }


def sampled(space, rng: np.random.Generator, batch: int):
    """``batch`` observations of ``space`` (a dict of them for a Dict) from ``rng``."""
    space.seed(int(rng.integers(1 << 30)))
    samples = [space.sample() for _ in range(batch)]
    if isinstance(samples[0], dict):
        return {key: np.stack([sample[key] for sample in samples]) for key in samples[0]}
    return np.stack(samples)


@pytest.mark.skipif(keras.backend.backend() != 'torch', reason="PyTorch's own ONNX exporter")
@pytest.mark.parametrize('case', ['normalised', 'box', 'dueling', 'masked', 'multi-discrete', 'dict', 'recurrent'])
def test_on_pytorch_onnx_is_written_in_the_process_and_acts_as_predict(case, tmp_path):
    from xagents.storage.export import load_exported

    agent = torch_export_cases()[case]()
    agent.fit(max_steps=256)
    masked = case == 'masked'
    path = agent.export(str(tmp_path / 'policy.onnx'), action_mask=masked)
    exported, rng = load_exported(path), np.random.default_rng(1)
    space = agent.envs.single_observation_space
    state = exported_state = None
    for step in range(3):
        observations = sampled(space, rng, 9)
        if case == 'normalised':
            observations = observations * 0.05  # CartPole's space is wide: within reach of its observations
        if masked:
            masks = rng.random((9, 6)) < 0.5
            masks[np.arange(9), rng.integers(0, 6, 9)] = True
            expected = agent.predict(observations, action_mask=masks)[0]
            got = exported(observations, masks)
            assert (masks[np.arange(9), got]).all()
        elif case == 'recurrent':
            starts = np.array([step == 0] * 5 + [step == 1] * 4)
            expected, state = agent.predict(observations, state=state, episode_start=starts)
            got, exported_state = exported(observations, state=exported_state, episode_start=starts)
            np.testing.assert_allclose(exported_state, state, atol=1e-5)
        else:
            expected, got = agent.predict(observations)[0], exported(observations)
        assert got.shape == expected.shape and got.dtype == (np.float32 if case == 'box' else np.int64)
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_an_agent_on_a_users_env_exports_on_tensorflow_and_says_how_elsewhere(tmp_path):
    """A TensorFlow process can export only an agent it can make again: one built on a user's env object exports on
    TensorFlow, and on another backend is refused in one line that says what to do, with nothing written."""
    import gymnasium as gym

    from xagents import PPO
    from xagents.storage.export import load_exported

    agent = PPO(gym.make('CartPole-v1'), n_steps=32, seed=0, quiet=True)
    path = str(tmp_path / 'policy')
    if keras.backend.backend() == 'tensorflow':
        observations = RNG.normal(size=(8, 4)).astype(np.float32)
        np.testing.assert_array_equal(load_exported(agent.export(path))(observations), agent.predict(observations)[0])
        return
    with pytest.raises(ValueError, match=r"this agent's envs were not made from one: make it from an id "
                                         r'\(PPO.from_env\), or save it and export it on TensorFlow') as error:
        agent.export(path)
    assert '\n' not in str(error.value) and not os.path.exists(path)


def test_a_backend_is_chosen_once_per_process_and_an_unknown_one_is_one_line():
    import xagents

    running = keras.backend.backend()
    xagents.use_backend(running)  # the one Keras runs on: nothing to do
    other = next(name for name in backend.BACKENDS if name != running)
    with pytest.raises(ValueError, match=f'Keras already runs on {running} in this process'):
        xagents.use_backend(other)
    with pytest.raises(ValueError, match="expected a backend among tensorflow, jax, torch, got 'mxnet'"):
        xagents.use_backend('mxnet')
    child = subprocess.run([sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', 'CartPole-v1', '--backend',
                            'mxnet'], capture_output=True, text=True, timeout=120)
    assert child.returncode == 2 and child.stderr.strip().count('\n') == 0, child.stderr
    assert "--backend: expected a backend among tensorflow, jax, torch, got 'mxnet'" in child.stderr


def test_the_command_line_trains_on_the_backend_it_names(tmp_path):
    other = next(name for name in backend.BACKENDS if name != keras.backend.backend())
    script = ('import sys; from xagents.app.cli import main; main(sys.argv[1:]); import keras; '
              'print("backend", keras.backend.backend())')
    child = subprocess.run([sys.executable, '-c', script, 'train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '600',
                            '--backend', other, '--no-save', '--seed', '0'], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != 'KERAS_BACKEND'})
    assert child.returncode == 0, child.stderr[-2000:]
    assert f'backend {other}' in child.stdout and 'Maximum steps (600) reached' in child.stdout


WITHOUT_TENSORFLOW = """
import sys
import numpy as np
from xagents import SAC, PPO
from xagents.app.cli import main
try:
    main(['train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '1024', '--seed', '0', '--save-dir', 'saves'])
except SystemExit as exit:
    assert not exit.code, exit.code
try:
    main(['play', 'ppo', '--env', 'CartPole-v1', '--weights', 'saves', '--episodes', '1'])
except SystemExit as exit:
    assert not exit.code, exit.code
agent = PPO.load('saves')
agent.fit(max_steps=512)
agent.save('resumed')
again = PPO.load('resumed')
observations = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
assert (again.predict(observations)[0] == agent.predict(observations)[0]).all() and again.steps == 1536
import keras
if keras.backend.backend() == 'torch':  # ONNX from PyTorch's own exporter
    from xagents.storage.export import load_exported
    assert (load_exported(agent.export('policy.onnx'))(observations) == agent.predict(observations)[0]).all()
    print('exported to onnx')
sac = SAC.from_env('Pendulum-v1', seed=0, quiet=True)  # (a target network: Keras clones the critic)
sac.fit(max_steps=300)
print('evaluated', sac.evaluate(1).returns.size, 'tensorflow' in sys.modules)
"""


@pytest.mark.skipif(keras.backend.backend() != 'tensorflow', reason='runs the other backends once, from this run')
@pytest.mark.parametrize('name', ['jax', 'torch'])
def test_jax_and_pytorch_train_save_load_resume_and_play_where_tensorflow_cannot_be_imported(name, tmp_path):
    blocked = tmp_path / 'blocked' / 'tensorflow'
    blocked.mkdir(parents=True)
    (blocked / '__init__.py').write_text('raise ImportError("TensorFlow is not installed here")\n')
    child = subprocess.run([sys.executable, '-c', WITHOUT_TENSORFLOW], capture_output=True, text=True, timeout=600,
                           cwd=tmp_path, env={**os.environ, 'KERAS_BACKEND': name, 'PYTHONPATH': str(blocked.parent)})
    assert child.returncode == 0, child.stderr[-3000:]
    assert 'evaluated 1 False' in child.stdout and 'Episode reward' in child.stdout, child.stdout[-2000:]
    assert ('exported to onnx' in child.stdout) == (name == 'torch')


@pytest.mark.skipif(keras.backend.backend() != 'tensorflow', reason='runs JAX once, from this run')
def test_the_gpu_check_runs_on_jax_on_a_cpu_where_tensorflow_cannot_be_imported(tmp_path):
    """benchmarks/gpu.py as on an accelerator machine with JAX and no TensorFlow: it trains, splits fit's time, and
    records each deterministic evaluation at its step."""
    blocked = tmp_path / 'blocked' / 'tensorflow'
    blocked.mkdir(parents=True)
    (blocked / '__init__.py').write_text('raise ImportError("TensorFlow is not installed here")\n')
    script = os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks', 'gpu.py')
    child = subprocess.run([sys.executable, script, '--runs', 'ppo-cartpole', 'sac-pendulum', '--max-steps', '1200',
                            '--eval-frequency', '600', '--eval-episodes', '2', '--output', 'gpu.json'],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path,
                           env={**os.environ, 'KERAS_BACKEND': 'jax', 'PYTHONPATH': str(blocked.parent)})
    assert child.returncode == 0, child.stderr[-3000:]
    with open(tmp_path / 'gpu.json') as file:
        results = json.load(file)
    assert results['device']['backend'] == 'jax' and results['device']['gpu'] is False
    assert [run['run'] for run in results['runs']] == ['ppo-cartpole', 'sac-pendulum']
    for run in results['runs']:  # SAC learns after 1,000 steps: its first updates come after them
        assert run['steps'] >= 1200 and run['updates'] >= 2 and run['first_update_s'] > 0 and run['update_s'] > 0
        assert 0 < run['collect_s'] < run['fit_s'] and run['first_update_s'] + run['update_s'] < run['fit_s']
        assert run['finished'] and [step >= due for (step, _), due in zip(run['evaluations'], (600, 1200))] == [True] * 2
        assert all(math.isfinite(reward) for _, reward in run['evaluations'])
        assert f"{run['agent']} {run['env']} seed 0: step {run['evaluations'][0][0]:,} evaluation" in child.stdout


NO_TENSORFLOW_INSTALLED = """
import importlib.util, os
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *args: None if name == 'tensorflow' else real(name, *args)
from xagents import PPO
agent = PPO.from_env('CartPole-v1', n_envs=2, seed=0, quiet=True)
for attempt in (lambda: agent.export('policy.onnx'), lambda: agent.fit(max_steps=256, tensorboard='logs')):
    try:
        attempt()
    except ValueError as error:
        print(error)
print(sorted(os.listdir('.')), agent.steps)
"""


@pytest.mark.skipif(keras.backend.backend() != 'tensorflow', reason='runs the other backends once, from this run')
def test_without_tensorflow_export_and_tensorboard_stop_in_one_line_that_says_to_install_it(tmp_path):
    """An install for JAX or PyTorch alone: what needs TensorFlow says so before anything is written or trained."""
    child = subprocess.run([sys.executable, '-c', NO_TENSORFLOW_INSTALLED], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path, env={**os.environ, 'KERAS_BACKEND': 'jax'})
    assert child.returncode == 0, child.stderr[-2000:]
    install = "needs TensorFlow, which this installation left out: pip install 'tensorflow>=2.16'"
    assert child.stdout.strip().splitlines()[-3:] == [
        f'exporting from the jax backend (a TensorFlow process writes the file) {install}',
        f'writing TensorBoard summaries {install}', '[] 0'], child.stdout

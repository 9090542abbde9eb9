"""A user's own network as the policy, on whichever Keras backend runs: a Keras layer or model everywhere, a
``torch.nn.Module`` on PyTorch, a Flax module or plain JAX functions (``keras.layers.JaxLayer``) on JAX.

It trains in place (the module's own parameters move), target networks are copies that follow it, a save loads back
with it and acts alike, it learns CartPole (a mean reward of 200, where a random policy scores about 22), and what
it cannot do (another backend's module, wrong sizes, export through TensorFlow) stops in one line.
"""
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from xagents import DQN, PPO, SAC

pytestmark = pytest.mark.backends

BACKEND = keras.backend.backend()
ON_TORCH = pytest.mark.skipif(BACKEND != 'torch', reason='a torch.nn.Module trains on the PyTorch backend')
ON_JAX = pytest.mark.skipif(BACKEND != 'jax', reason='Flax modules and JaxLayer train on the JAX backend')
OBSERVATIONS = np.random.default_rng(0).normal(0, [1.0, 1.0, 0.1, 1.0], (32, 4)).astype(np.float32)


class TwoHeads(keras.layers.Layer):
    """A Keras layer (not a model) of CartPole's observations: logits and value, 32 tanh units between."""

    def __init__(self, actions: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.actions = actions
        self.hidden = keras.layers.Dense(32, activation='tanh')
        self.logits, self.value = keras.layers.Dense(actions), keras.layers.Dense(1)

    def call(self, observations):
        hidden = self.hidden(observations)
        return self.logits(hidden), self.value(hidden)

    def get_config(self):
        return {**super().get_config(), 'actions': self.actions}


def torch_modules():
    """A PPO actor-critic module and SAC's actor and twin critic, for CartPole and Pendulum."""
    import torch
    from torch import nn

    class ActorCritic(nn.Module):
        def __init__(self, inputs: int = 4, actions: int = 2):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(inputs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
            self.logits, self.value = nn.Linear(64, actions), nn.Linear(64, 1)

        def forward(self, observations):
            hidden = self.body(observations)
            return self.logits(hidden), self.value(hidden)

    class TwinQ(nn.Module):
        def __init__(self, inputs: int):
            super().__init__()
            self.q1, self.q2 = (nn.Sequential(nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, 1)) for _ in range(2))

        def forward(self, observations_and_actions):
            return self.q1(observations_and_actions), self.q2(observations_and_actions)

    torch.manual_seed(0)
    return torch, nn, ActorCritic, TwinQ


def test_a_keras_layer_trains_as_the_policy_and_a_wrong_size_is_refused_in_one_line():
    layer = TwoHeads()
    agent = PPO.from_env('CartPole-v1', model=layer, seed=0, quiet=True, n_steps=64)
    before = [weight.copy() for weight in layer.get_weights()]
    agent.fit(max_steps=512)
    assert agent.model.layers[-1] is layer
    assert all(not np.allclose(old, new) for old, new in zip(before, layer.get_weights()))
    with pytest.raises(ValueError, match=r"^PPO's model: expected outputs policy \(2 units\), value \(1 units\), "
                                         r'got 2 output\(s\) of size 3, 1$'):
        PPO.from_env('CartPole-v1', model=TwoHeads(3), seed=0, quiet=True)
    with pytest.raises(ValueError, match=r"^PPO's model: expected a \.cfg file, a Keras model or layer, a "
                                         r'torch\.nn\.Module \(PyTorch backend\) or a Flax linen module \(JAX '
                                         r'backend\), got function$'):
        PPO.from_env('CartPole-v1', model=lambda observations: observations, seed=0, quiet=True)


def test_a_keras_layer_critic_gets_a_target_copy_that_follows_it():
    class Twin(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.q1, self.q2 = keras.layers.Dense(1), keras.layers.Dense(1)

        def call(self, inputs):
            return self.q1(inputs), self.q2(inputs)

    agent = SAC.from_env('Pendulum-v1', critic_model=Twin(), seed=0, quiet=True, buffer_initial_size=64,
                         buffer_batch_size=32, tau=0.5)
    online, target = agent.models['critic'], agent.models['target_critic']
    assert all(np.array_equal(a, b) for a, b in zip(online.get_weights(), target.get_weights()))
    agent.fit(max_steps=128)
    moved = [not np.allclose(a, b) for a, b in zip(online.get_weights(), target.get_weights())]
    assert any(moved), 'the target is the online critic itself'
    assert not any(variable is other for variable in target.weights for other in online.weights)


@ON_TORCH
def test_a_torch_module_trains_in_place_and_its_target_copy_follows_it_by_polyak_averaging():
    torch, nn, ActorCritic, TwinQ = torch_modules()
    module = ActorCritic()
    before = [parameter.detach().clone() for parameter in module.parameters()]
    agent = PPO.from_env('CartPole-v1', model=module, seed=0, quiet=True, n_steps=64)
    agent.fit(max_steps=512)
    assert all(not torch.equal(old, new) for old, new in zip(before, module.parameters()))
    # the module is the model the agent acts with: its own forward pass gives the agent's logits
    logits = module(torch.as_tensor(OBSERVATIONS))[0].detach().cpu().numpy()
    actions, _ = agent.predict(OBSERVATIONS, deterministic=True)
    np.testing.assert_array_equal(actions, logits.argmax(-1))

    critic = TwinQ(3 + 1)
    agent = SAC.from_env('Pendulum-v1', critic_model=critic, seed=0, quiet=True, buffer_initial_size=64,
                         buffer_batch_size=32, tau=0.5, update_every=1, gradient_steps=1)
    target = agent.models['target_critic'].layers[-1].module
    assert target is not critic
    assert all(torch.equal(a, b) for a, b in zip(critic.parameters(), target.parameters()))
    online_before = [parameter.detach().clone() for parameter in critic.parameters()]
    target_before = [parameter.detach().clone() for parameter in target.parameters()]
    agent.fit(max_steps=64)  # one update, on 64 stored transitions: target <- (target + online) / 2
    assert int(keras.ops.convert_to_numpy(agent.gradient_updates)) == 1
    for old_online, old_target, online, new_target in zip(online_before, target_before, critic.parameters(),
                                                           target.parameters()):
        assert not torch.equal(old_online, online)
        torch.testing.assert_close(new_target, (old_target + online.detach()) / 2)


@ON_TORCH
def test_a_torch_module_saves_loads_with_it_resumes_evaluates_exports_to_onnx_and_refuses_savedmodel(tmp_path):
    torch, nn, ActorCritic, TwinQ = torch_modules()
    agent = PPO.from_env('CartPole-v1', model=ActorCritic(), seed=0, quiet=True, n_steps=64)
    agent.fit(max_steps=512)
    agent.save(str(tmp_path / 'saved'))
    with pytest.raises(ValueError, match=r'could not save model \(not JSON\): pass it to load$'):
        PPO.load(str(tmp_path / 'saved'))
    fresh = ActorCritic()
    loaded = PPO.load(str(tmp_path / 'saved'), model=fresh)
    np.testing.assert_array_equal(loaded.predict(OBSERVATIONS, deterministic=True)[0],
                                  agent.predict(OBSERVATIONS, deterministic=True)[0])
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), agent.model.layers[-1].module.parameters()))
    assert loaded.steps == agent.steps
    loaded.fit(max_steps=loaded.steps + 128)
    assert loaded.steps >= 640
    assert len(loaded.evaluate(episodes=2).returns) == 2
    from xagents.storage.export import load_exported

    exported = load_exported(agent.export(str(tmp_path / 'policy.onnx')))  # PyTorch's exporter, in this process
    np.testing.assert_array_equal(exported(OBSERVATIONS), agent.predict(OBSERVATIONS, deterministic=True)[0])
    with pytest.raises(ValueError, match=r'^on the torch backend, export runs in a TensorFlow process .* cannot '
                                         r'hold your model \(a network of yours, not JSON\)'):
        agent.export(str(tmp_path / 'policy'))  # a SavedModel
    assert not (tmp_path / 'policy').exists()


@ON_TORCH
def test_a_torch_module_of_another_input_size_or_output_is_refused_in_one_line():
    torch, nn, ActorCritic, TwinQ = torch_modules()
    with pytest.raises(ValueError, match=r"^PPO's model: expected it to take observations shaped \(4,\), calling "
                                         r'it failed: mat1 and mat2 shapes cannot be multiplied'):
        PPO.from_env('CartPole-v1', model=ActorCritic(inputs=3), quiet=True)
    with pytest.raises(ValueError, match=r"^DQN's model: expected outputs q \(2 units\), got 2 output\(s\)"):
        DQN.from_env('CartPole-v1', model=ActorCritic(), quiet=True)

    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.logits, self.value = nn.Linear(4, 2), nn.Linear(4, 1)

        def forward(self, observations):
            return {'logits': self.logits(observations), 'value': self.value(observations)}

    with pytest.raises(ValueError, match=r"^PPO's model: expected it to return a tensor or a tuple of tensors, "
                                         r'got dict$'):
        PPO.from_env('CartPole-v1', model=Named(), quiet=True)


@ON_TORCH
def test_a_torch_module_learns_cartpole():
    torch, nn, ActorCritic, TwinQ = torch_modules()
    agent = PPO.from_env('CartPole-v1', model=ActorCritic(), seed=0, quiet=True)
    run = agent.fit(target_reward=200, max_steps=60_000)
    assert run.mean_reward >= 200 and agent.steps <= 60_000, (run.mean_reward, agent.steps)


def threads_after_imports(first: str, **environment: str) -> tuple[int, list[str]]:
    """PyTorch's threads after xagents' PPO is imported with ``first`` ('torch' or 'xagents') imported first, in a
    fresh process, and the lines it wrote to stderr."""
    imports = 'import torch\nfrom xagents import PPO' if first == 'torch' else 'from xagents import PPO\nimport torch'
    environment = {key: value for key, value in os.environ.items() if key != 'OMP_WAIT_POLICY'} | environment
    result = subprocess.run([sys.executable, '-c', f'{imports}\nprint(torch.get_num_threads())'], capture_output=True,
                            text=True, timeout=300, env={**environment, 'KERAS_BACKEND': 'torch'})
    assert result.returncode == 0, result.stderr[-3000:]
    return int(result.stdout), result.stderr.splitlines()


@ON_TORCH
def test_torch_imported_before_xagents_computes_on_one_thread_and_says_so_in_one_line():
    # Its OpenMP threads would spin (OMP_WAIT_POLICY=PASSIVE, set by xagents, is read when PyTorch loads): beside
    # other work, the guide's PyTorch example then took 59 s for 5,000 steps, against 4.6 s on one thread.
    threads, errors = threads_after_imports('xagents')
    assert errors == []
    if threads == 1:
        pytest.skip('PyTorch computes on one thread here anyway')
    assert threads_after_imports('torch') == (1, [
        'PyTorch was imported before xagents, too early for OMP_WAIT_POLICY=PASSIVE, and its idle threads would '
        f'spin: computing on 1 thread of {threads} (import xagents first, or set OMP_WAIT_POLICY=PASSIVE before '
        'starting Python, to use them all)'])
    assert threads_after_imports('torch', OMP_WAIT_POLICY='PASSIVE') == (threads, [])


def run_without(package: str, code: str, tmp_path) -> subprocess.CompletedProcess:
    """``code`` on this backend in a process where ``package`` is not installed (as Python sees it: no spec, and
    its import fails)."""
    return subprocess.run([sys.executable, '-c', f'import sys\nsys.modules[{package!r}] = None\n{code}'],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, 'KERAS_BACKEND': BACKEND})


@ON_TORCH
def test_a_torch_module_exported_to_onnx_without_onnx_installed_says_what_to_install_in_one_line(tmp_path):
    code = '''
from xagents import PPO
import torch

class Heads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.logits, self.value = torch.nn.Linear(4, 2), torch.nn.Linear(4, 1)

    def forward(self, observations):
        return self.logits(observations), self.value(observations)

agent = PPO.from_env('CartPole-v1', model=Heads(), quiet=True)
try:
    agent.export('policy.onnx')
except ImportError as error:
    print(error)
'''
    result = run_without('onnx', code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith('exporting to onnx needs the onnx package: pip install ')
    assert len(result.stdout.splitlines()) == 1 and 'onnx' in result.stdout.split('pip install ')[1], result.stdout
    assert not (tmp_path / 'policy.onnx').exists()


@ON_JAX
def test_a_flax_policy_is_refused_for_export_in_one_line_that_does_not_ask_for_tensorflow(tmp_path):
    pytest.importorskip('flax.linen')
    code = '''
import flax.linen as linen
from xagents import PPO

class ActorCritic(linen.Module):
    @linen.compact
    def __call__(self, observations):
        return linen.Dense(2)(observations), linen.Dense(1)(observations)

agent = PPO.from_env('CartPole-v1', model=ActorCritic(), quiet=True)
for path in ('policy.onnx', 'policy'):
    try:
        agent.export(path)
    except ValueError as error:
        print(error)
'''
    result = run_without('tensorflow', code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert lines[0] == ('on the jax backend, export runs in a TensorFlow process that makes the agent again from a '
                        'save, and a save cannot hold your model (a network of yours, not JSON): export works for '
                        'networks built from .cfg files, for Keras models on the TensorFlow backend, and to ONNX on '
                        'PyTorch; a Flax module or JAX functions do not export (act with predict, or build the '
                        'network from a .cfg file)')
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(BACKEND == 'torch', reason='refuses a torch.nn.Module off the PyTorch backend')
def test_a_torch_module_off_the_pytorch_backend_is_refused_in_one_line():
    torch = pytest.importorskip('torch')
    with pytest.raises(ValueError, match=rf"^PPO's model: a torch\.nn\.Module trains on the torch backend "
                                         rf'\(--backend torch or KERAS_BACKEND=torch\), and this run is on {BACKEND}$'):
        PPO.from_env('CartPole-v1', model=torch.nn.Linear(4, 2), quiet=True)


@ON_JAX
def test_a_flax_module_and_jax_functions_train_and_a_target_copy_follows_them():
    import jax
    import jax.numpy as jnp
    linen = pytest.importorskip('flax.linen')

    class ActorCritic(linen.Module):
        @linen.compact
        def __call__(self, observations):
            hidden = linen.tanh(linen.Dense(64)(observations))
            return linen.Dense(2)(hidden), linen.Dense(1)(hidden)

    agent = PPO.from_env('CartPole-v1', model=ActorCritic(), seed=0, quiet=True, n_steps=64)
    before = [weight.copy() for weight in agent.model.get_weights()]
    agent.fit(max_steps=512)
    assert all(not np.allclose(old, new) for old, new in zip(before, agent.model.get_weights()))

    def init_fn(rng, inputs):
        return {'w': jax.random.normal(rng, (inputs.shape[-1], 2)) * 0.1, 'b': jnp.zeros(2)}

    def call_fn(params, inputs):
        return inputs @ params['w'] + params['b']

    agent = DQN.from_env('CartPole-v1', model=keras.layers.JaxLayer(call_fn, init_fn=init_fn), seed=0,
                         quiet=True, buffer_initial_size=64, buffer_batch_size=32, target_update_interval=1,
                         tau=0.5, update_every=1, gradient_steps=1)
    online, target = agent.models['model'], agent.models['target_model']
    assert all(np.array_equal(a, b) for a, b in zip(online.get_weights(), target.get_weights()))
    old_online, old_target = online.get_weights(), target.get_weights()
    agent.fit(max_steps=64)  # one update, on 64 stored transitions: target <- (target + online) / 2
    assert int(keras.ops.convert_to_numpy(agent.gradient_updates)) == 1
    for a, b, c, d in zip(old_online, old_target, online.get_weights(), target.get_weights()):
        assert not np.allclose(a, c)
        np.testing.assert_allclose(d, (b + c) / 2, rtol=1e-5, atol=1e-6)


@ON_JAX
def test_a_flax_module_learns_cartpole_without_importing_tensorflow():
    pytest.importorskip('flax.linen')
    code = '''
import sys
import flax.linen as linen
from xagents import PPO

class ActorCritic(linen.Module):
    @linen.compact
    def __call__(self, observations):
        hidden = linen.tanh(linen.Dense(64)(linen.tanh(linen.Dense(64)(observations))))
        return linen.Dense(2)(hidden), linen.Dense(1)(hidden)

agent = PPO.from_env('CartPole-v1', model=ActorCritic(), seed=0, quiet=True)
run = agent.fit(target_reward=200, max_steps=60_000)
print(run.mean_reward, agent.steps, 'tensorflow' in sys.modules)
'''
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600,
                            env={**os.environ, 'KERAS_BACKEND': 'jax'})
    assert result.returncode == 0, result.stderr[-3000:]
    reward, steps, imported = result.stdout.split()[-3:]
    assert float(reward) >= 200 and int(steps) <= 60_000 and imported == 'False', result.stdout


def test_no_page_resumes_with_max_steps_counted_from_step_0_without_total():
    # fit(max_steps=N) trains N more steps: the guide's `again.fit(max_steps=again.steps + 5_000)` trained 25,344
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / 'docs'
    found = [(page.name, line) for page in docs.rglob('*.md') for line in page.read_text().splitlines()
             if re.search(r'max_steps=\w+\.steps\s*\+', line) and 'total=True' not in line]
    assert not found, found

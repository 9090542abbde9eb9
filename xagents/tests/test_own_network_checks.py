"""A user's network is checked when the agent is built, before anything trains: its outputs' dtype (float32), shape
(``(batch, units)``, one row per observation at every batch size), values (finite) and its weights (some trainable).

Each refusal is one ValueError line naming the role and the fix; without the checks these networks failed deep
inside TensorFlow, JAX or torch.autograd, made ``predict`` return one action for a batch, or trained nothing unsaid.
"""
import keras
import numpy as np
import pytest

from xagents import DQN, PPO, SAC

pytestmark = pytest.mark.backends

BACKEND = keras.backend.backend()
ON_TORCH = pytest.mark.skipif(BACKEND != 'torch', reason='a torch.nn.Module trains on the PyTorch backend')
ON_JAX = pytest.mark.skipif(BACKEND != 'jax', reason='Flax modules and JaxLayer train on the JAX backend')

DTYPE = r"^PPO's model: expected float32 outputs, got {} \(output {} of 2\): cast it in the network"
SHAPE = (r"^PPO's model: expected outputs shaped \(batch, units\), one row per observation, got {} for a batch of "
         r'{} \(output 1 of 2\)')
FINITE = r"^PPO's model: expected finite outputs, got {} on zero observations \(output 1 of 2\)"
WEIGHTS = r"^PPO's model: expected trainable weights, got {}, so nothing would train"


def two_heads(policy=None, dtype: str | None = None, value_dtype: str | None = None) -> keras.Model:
    """CartPole's logits (``policy`` applied to them) and value, from 8 hidden units."""
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation='tanh')(inputs)
    logits = keras.layers.Dense(2, dtype=dtype)(hidden)
    logits = logits if policy is None else keras.layers.Lambda(policy)(logits)
    return keras.Model(inputs, [logits, keras.layers.Dense(1, dtype=value_dtype)(hidden)])


def refused(network, pattern: str, agent=PPO, env: str = 'CartPole-v1', **settings) -> None:
    with pytest.raises(ValueError, match=pattern) as error:
        agent.from_env(env, **{'model': network, **settings}, seed=0, quiet=True)
    assert '\n' not in str(error.value), str(error.value)


@pytest.mark.parametrize('dtype, output', [
    ('float16', 1), ('bfloat16', 1), ('int32', 1), ('bool', 1), ('complex64', 1), ('float16', 2)])
def test_keras_outputs_not_float32_are_refused(dtype, output):
    if dtype == 'complex64':
        model = two_heads(lambda logits: keras.ops.cast(logits, 'complex64'))
    elif output == 2:
        model = two_heads(value_dtype=dtype)
    elif dtype in ('int32', 'bool'):
        model = two_heads(lambda logits: keras.ops.cast(logits, dtype))
    else:
        model = two_heads(dtype=dtype)
    refused(model, DTYPE.format(dtype, output))


@pytest.mark.parametrize('policy, shape, batch', [
    (lambda logits: keras.ops.mean(logits, axis=0, keepdims=True), r'\(1, 2\)', 2),  # one row, whatever the batch
    (lambda logits: logits[:2], r'\(2, 2\)', 5),  # two rows: right at one batch size only
    (lambda logits: keras.ops.expand_dims(logits, 1), r'\(2, 1, 2\)', 2),  # rank 3
    (lambda logits: logits[:, 0], r'\(2,\)', 2),  # rank 1
    (lambda logits: keras.ops.sum(logits), r'\(\)', 2),  # a scalar
])
def test_keras_outputs_not_one_row_per_observation_are_refused(policy, shape, batch):
    refused(two_heads(policy), SHAPE.format(shape, batch))


@pytest.mark.parametrize('value, name', [(np.nan, 'nan'), (np.inf, 'inf'), (-np.inf, 'inf')])
def test_keras_outputs_not_finite_at_build_are_refused(value, name):
    refused(two_heads(lambda logits: logits + np.float32(value)), FINITE.format(name))


def test_a_keras_model_without_trainable_weights_is_refused():
    inputs = keras.Input((4,))
    slices = keras.Model(inputs, [keras.layers.Lambda(lambda x: x[:, :2])(inputs),
                                  keras.layers.Lambda(lambda x: x[:, 2:3])(inputs)])
    refused(slices, WEIGHTS.format('none'))
    frozen = two_heads()
    frozen.trainable = False
    refused(frozen, WEIGHTS.format('6 frozen'))


def test_off_policy_networks_are_checked_alike_and_a_fitting_network_acts_once_per_observation():
    inputs = keras.Input((4,))
    q_values = keras.layers.Dense(2)(keras.layers.Dense(8, activation='relu')(inputs))
    one_row = keras.Model(inputs, keras.layers.Lambda(lambda q: keras.ops.max(q, axis=0, keepdims=True))(q_values))
    with pytest.raises(ValueError, match=r"^DQN's model: expected outputs shaped \(batch, units\), one row per "
                                         r'observation, got \(1, 2\) for a batch of 2 \(output 1 of 1\)'):
        DQN.from_env('CartPole-v1', model=one_row, quiet=True)
    inputs = keras.Input((4,))  # Pendulum's 3 observations and its action
    q = keras.layers.Dense(1)(inputs)
    twin = keras.Model(inputs, [q, keras.layers.Lambda(lambda q: keras.ops.cast(q, 'float16'))(q)])
    with pytest.raises(ValueError, match=r"^SAC's critic: expected float32 outputs, got float16 \(output 2 of 2\)"):
        SAC.from_env('Pendulum-v1', critic_model=twin, quiet=True)
    agent = PPO.from_env('CartPole-v1', model=two_heads(), seed=0, quiet=True)
    for batch in (1, 3, 7):
        assert agent.predict(np.zeros((batch, 4), np.float32), deterministic=True)[0].shape == (batch,)


def torch_two_heads(forward):
    """A torch module of CartPole's observations whose ``forward(logits, value)`` makes its outputs."""
    import torch
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.logits, self.value = nn.Linear(4, 2), nn.Linear(4, 1)

        def forward(self, observations):
            return forward(torch, self.logits(observations), self.value(observations))

    return Heads()


@ON_TORCH
@pytest.mark.parametrize('forward, pattern', [
    (lambda torch, logits, value: (logits.long(), value), DTYPE.format('int64', 1)),
    (lambda torch, logits, value: (logits > 0, value), DTYPE.format('bool', 1)),
    (lambda torch, logits, value: (logits.double(), value), DTYPE.format('float64', 1)),
    (lambda torch, logits, value: (logits.half(), value), DTYPE.format('float16', 1)),
    (lambda torch, logits, value: (logits, torch.complex(value, value)), DTYPE.format('complex64', 2)),
    (lambda torch, logits, value: (logits.mean(0, keepdim=True), value), SHAPE.format(r'\(1, 2\)', 2)),
    (lambda torch, logits, value: (logits[:2], value), SHAPE.format(r'\(2, 2\)', 5)),
    (lambda torch, logits, value: (logits[:, None], value), SHAPE.format(r'\(2, 1, 2\)', 2)),
    (lambda torch, logits, value: (torch.log(logits - logits - 1), value), FINITE.format('nan')),
])
def test_torch_modules_are_checked_for_dtype_rows_and_values(forward, pattern):
    refused(torch_two_heads(forward), pattern)


@ON_TORCH
def test_a_torch_module_without_trainable_parameters_is_refused():
    import torch

    class Slices(torch.nn.Module):
        def forward(self, observations):
            return observations[:, :2] * 1.0, observations[:, 2:3] * 1.0

    refused(Slices(), WEIGHTS.format('none'))
    frozen = torch_two_heads(lambda torch, logits, value: (logits, value))
    frozen.requires_grad_(False)
    refused(frozen, WEIGHTS.format('4 frozen'))


@ON_JAX
def test_flax_modules_and_jax_functions_are_checked_alike():
    import jax.numpy as jnp
    linen = pytest.importorskip('flax.linen')

    class Heads(linen.Module):
        mode: str

        @linen.compact
        def __call__(self, observations):
            if self.mode == 'none':  # no parameters
                return observations[:, :2], observations[:, 2:3]
            logits, value = linen.Dense(2)(observations), linen.Dense(1)(observations)
            if self.mode == 'int':
                return logits.astype(jnp.int32), value
            if self.mode == 'row':
                return logits.mean(0, keepdims=True), value
            return logits / 0.0 * 0.0, value  # nan

    refused(Heads('int'), DTYPE.format('int32', 1))
    refused(Heads('row'), SHAPE.format(r'\(1, 2\)', 2))
    refused(Heads('nan'), FINITE.format('nan'))
    refused(Heads('none'), WEIGHTS.format('none'))
    layer = keras.layers.JaxLayer(lambda params, inputs: (inputs[:, :2], inputs[:, 2:3]), params={})
    refused(layer, WEIGHTS.format('none'))

"""SimBa networks: the residual block against its equation in NumPy, cfg models of residual blocks and layer norms
acting in NumPy exactly as in Keras, and ``simba=True``: the packaged SimBa networks in place of default and preset
ones, running observation normalisation, and refusals where it cannot apply."""
import keras
import numpy as np
import pytest

from xagents.crossq import CrossQ
from xagents.envs.creation import create_envs
from xagents.networks.batch_renorm import BatchRenorm
from xagents.networks.models import CfgError, NumpyForward, Output, build_model
from xagents.networks.residual import ResidualBlock
from xagents.registry import agent_class
from xagents.sac import SAC

pytestmark = pytest.mark.backends  # the layers and their NumPy mirror on every backend

SIMBA_CFG = """
[dense-1]
units=4

[residual-1]
units=4
expansion=2

[layernorm-1]

[dense-2]
output=1
"""


def layer_norm(x, gamma, beta):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * gamma + beta


def test_a_residual_block_adds_its_input_to_an_mlp_of_its_layer_norm():
    rng = np.random.default_rng(0)
    block = ResidualBlock(3, expansion=2)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    block(x)
    gamma, beta = rng.normal(size=3), rng.normal(size=3)
    w1, b1, w2, b2 = rng.normal(size=(3, 6)), rng.normal(size=6), rng.normal(size=(6, 3)), rng.normal(size=3)
    block.normalise.set_weights([gamma, beta])
    block.expand.set_weights([w1, b1])
    block.project.set_weights([w2, b2])
    expected = x + np.maximum(layer_norm(x, gamma, beta) @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(keras.ops.convert_to_numpy(block(x)), expected, rtol=1e-4, atol=1e-5)


def test_a_simba_cfg_acts_in_numpy_as_in_keras(tmp_path):
    path = tmp_path / 'simba.cfg'
    path.write_text(SIMBA_CFG)
    space = create_envs('Pendulum-v1').single_observation_space
    model = build_model(str(path), space, [Output('policy', 2)])
    rng = np.random.default_rng(1)
    for weight in model.weights:  # away from the initial ones (layer norm's ones and zeros)
        weight.assign(rng.normal(size=weight.shape).astype(np.float32))
    assert [type(layer) for layer in model.layer_graph.branches[0]] == [
        keras.layers.Dense, ResidualBlock, keras.layers.LayerNormalization, keras.layers.Dense]
    assert NumpyForward.supports(model)
    observations = rng.normal(size=(7, 3)).astype(np.float32)
    np.testing.assert_allclose(NumpyForward(model)(observations)[0], keras.ops.convert_to_numpy(model(observations)),
                               rtol=1e-4, atol=1e-5)


def test_a_residual_block_must_take_as_many_features_as_it_has_units(tmp_path):
    path = tmp_path / 'wrong.cfg'
    path.write_text(SIMBA_CFG.replace('[dense-1]\nunits=4', '[dense-1]\nunits=5'))
    with pytest.raises(CfgError, match=r'\[residual-1\] units: a residual block adds its input to its output: it '
                                       r'takes 4 features, got 5 \(put a \[dense-N\] of units=4 before it\)'):
        build_model(str(path), create_envs('Pendulum-v1').single_observation_space, [Output('policy', 2)])


@pytest.mark.parametrize('agent, env_id, roles', [
    ('sac', 'Hopper-v5', ('actor', 'critic')), ('tqc', 'Pendulum-v1', ('actor', 'critic')),
    ('td3', 'Pendulum-v1', ('actor', 'critic')), ('ddpg', 'Pendulum-v1', ('actor', 'critic')),
    ('ppo', 'CartPole-v1', ('model',)), ('a2c', 'Pendulum-v1', ('model',)), ('trpo', 'CartPole-v1', ('actor', 'critic')),
    ('acer', 'CartPole-v1', ('model',)), ('dqn', 'CartPole-v1', ('model',)), ('qrdqn', 'LunarLander-v3', ('model',)),
])
def test_simba_builds_residual_networks_in_place_of_default_and_preset_ones(agent, env_id, roles):
    # Hopper's and LunarLander's presets name 256-256 cfgs
    built = agent_class(agent).from_env(env_id, simba=True, seed=0, quiet=True)
    for role in roles:
        layers = built.models[role].layers
        assert any(isinstance(layer, ResidualBlock) for layer in layers), role
        assert any(isinstance(layer, keras.layers.LayerNormalization) for layer in layers), role
    assert built.observation_stats is not None  # SimBa's running statistics of the inputs


def test_crossq_simba_normalises_with_batch_renormalisation_that_trains_inside_the_blocks():
    """One update of three gradient steps, the actor every third: every batch renormalisation of the critics, those
    inside the residual blocks too, ran three training calls, and the actor's one."""
    agent = CrossQ(create_envs('Pendulum-v1'), simba=True, seed=0, buffer_initial_size=256, buffer_batch_size=32,
                   gradient_steps=3, update_every=300, policy_delay=3, quiet=True)
    blocks = [layer for layer in agent.critic.layers if isinstance(layer, ResidualBlock)]
    assert len(blocks) == 4 and all(isinstance(block.normalise, BatchRenorm) for block in blocks)
    assert not any(isinstance(layer, keras.layers.LayerNormalization) for layer in agent.critic.layers)
    agent.fit(max_steps=300)

    def training_calls(model: keras.Model) -> list[int]:
        renorms = [layer.normalise if isinstance(layer, ResidualBlock) else layer for layer in model.layers]
        return [int(keras.ops.convert_to_numpy(layer.steps)) for layer in renorms if isinstance(layer, BatchRenorm)]

    assert training_calls(agent.critic) == [3] * 8  # per critic: the input, two blocks, before the head
    actor_calls = training_calls(agent.actor)
    assert actor_calls and set(actor_calls) == {1}


def test_dueling_simba_keeps_its_two_heads():
    agent = agent_class('dqn')(create_envs('CartPole-v1'), simba=True, dueling=True, quiet=True)
    assert len(agent.model.outputs) == 2 and any(isinstance(layer, ResidualBlock) for layer in agent.model.layers)


def test_simba_and_a_network_of_ones_own_are_refused_together_and_where_none_is_packaged(tmp_path):
    path = tmp_path / 'mine.cfg'
    path.write_text(SIMBA_CFG)
    with pytest.raises(ValueError, match=r"SAC: simba builds the actor network, and one of yours is given "
                                         r"too \('.*mine.cfg'\): give one of them"):
        SAC(create_envs('Pendulum-v1'), actor_model=str(path), simba=True, quiet=True)
    with pytest.raises(ValueError, match=r'PPO has no SimBa model network for these observations \(no packaged '
                                         r'cnn-model-simba.cfg\): leave simba off'):  # pictures
        agent_class('ppo')(create_envs('PongNoFrameskip-v4'), simba=True, quiet=True)
    with pytest.raises(ValueError, match=r'PPO has no recurrent SimBa model network \(no packaged '
                                         r'ann-model-simba-recurrent.cfg\): leave simba or recurrent off'):
        agent_class('ppo')(create_envs('CartPole-v1'), simba=True, recurrent='lstm', quiet=True)


def test_simba_leaves_an_explicit_normalisation_choice_alone():
    agent = SAC(create_envs('Pendulum-v1'), simba=True, normalize_observations=False, quiet=True)
    assert agent.observation_stats is None


@pytest.mark.parametrize('agent', ['dqn', 'qrdqn'])
def test_dueling_simba_has_the_plain_simba_trunk_and_acts_as_its_equations_in_numpy(agent):
    """The dueling Q-network is the plain one's trunk (embedding, residual block, final layer norm) under two heads:
    Q = V + A - mean_a A of the layer norm's features (Lee et al. 2024 end every SimBa network with that norm)."""
    envs = create_envs('CartPole-v1')
    plain = agent_class(agent)(envs, simba=True, seed=0, quiet=True)
    dueling = agent_class(agent)(envs, simba=True, dueling=True, seed=0, quiet=True)
    trunk = [type(layer) for layer in dueling.model.layer_graph.trunk]
    assert trunk == [type(layer) for layer in plain.model.layer_graph.trunk]
    assert trunk == [keras.layers.Dense, ResidualBlock, keras.layers.LayerNormalization]
    if agent != 'dqn':
        return
    rng = np.random.default_rng(0)
    for weight in dueling.model.weights:  # away from the initial ones (layer norm's ones and zeros)
        weight.assign(rng.normal(size=weight.shape).astype(np.float32) * 0.3)
    embed, block, norm = dueling.model.layer_graph.trunk
    (value_head,), (advantage_head,) = dueling.model.layer_graph.branches
    w0, b0 = embed.get_weights()
    gamma, beta = block.normalise.get_weights()
    w1, b1, w2, b2 = block.expand.get_weights() + block.project.get_weights()
    x = rng.normal(size=(5, 4)).astype(np.float32)
    h = x @ w0 + b0
    h = h + np.maximum(layer_norm(h, gamma, beta) @ w1 + b1, 0) @ w2 + b2
    h = layer_norm(h, *norm.get_weights())
    value, advantage = h @ value_head.get_weights()[0] + value_head.get_weights()[1], \
        h @ advantage_head.get_weights()[0] + advantage_head.get_weights()[1]
    expected = value + advantage - advantage.mean(-1, keepdims=True)
    q = dueling.q_values(dueling.model, keras.ops.convert_to_tensor(x))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(q), expected, rtol=1e-4, atol=1e-4)

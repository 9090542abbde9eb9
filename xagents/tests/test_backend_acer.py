"""ACER on whichever Keras backend runs (``KERAS_BACKEND``: tensorflow, the default, or jax).

Its compiled update (``train_step``) on test_maths' tiny fixed-weight case, against the update worked out by hand
there, with and without the trust region; the average network is read as it is at each call and moved by it (on
JAX a variable left out of ``graph_variables`` would be a constant of the compilation, its assignments lost).
"""
import numpy as np
import pytest
from keras import ops

from xagents.acer import ACER
from xagents.tests.test_maths import LN3, acer_update_by_hand
from xagents.tests.test_off_policy import linear
from xagents.envs.creation import create_envs

pytestmark = pytest.mark.backends

POLICY_KERNEL = np.array([[LN3, 0], [0, 0], [0, LN3], [0, 0]])
Q_KERNEL = np.array([[1.0, 2.0], [0.0, -1.0], [2.0, 1.0], [0, 0]])
SETTINGS = {'importance_c': 1.2, 'delta': 0.1, 'entropy_coef': 0.01, 'value_loss_coef': 0.5, 'grad_norm': 1.0,
            'lr': 0.01, 'rmsprop_alpha': 0.99, 'rmsprop_epsilon': 1e-5}
# test_maths' segment: two steps of one env, then the bootstrap observation; rewards -1, -2; behaviour policies
# (1/2, 1/2) and (0.8, 0.2), so that truncation and the trust region (delta 0.1) both bite.
SEGMENT = (np.eye(4, dtype=np.float32)[:3, None], np.array([[0], [1]]), np.array([[-1.0], [-2.0]], np.float32),
           np.zeros((2, 1), np.float32), np.array([[[0.5, 0.5]], [[0.8, 0.2]]], np.float32))


def acer(**settings) -> ACER:
    """ACER on CartPole (one env, segments of 2 steps) with test_maths' model: logits = x P, Q = x K."""
    return ACER(create_envs('CartPole-v1'), linear(4, POLICY_KERNEL, Q_KERNEL), n_steps=2, buffer_initial_size=1,
                ema_alpha=0.9, **{**SETTINGS, **settings})


def values(variables) -> list[np.ndarray]:
    return [ops.convert_to_numpy(variable).copy() for variable in variables]


@pytest.mark.parametrize('trust_region', [True, False])
def test_compiled_update_by_hand_and_the_average_follows(trust_region):
    """The metrics and weights of test_maths' worked update (without the trust region: its projection never
    bites, an infinite delta); the average network then holds 0.9 of its weights and 0.1 of the new ones."""
    agent = acer(trust_region=trust_region)
    average = values(agent.average.weights)
    metrics = agent.train_step(*SEGMENT)
    expected, after = acer_update_by_hand(POLICY_KERNEL, Q_KERNEL, *SEGMENT, agent.gamma, 1.2, 0.01, 0.5,
                                          0.1 if trust_region else np.inf, 1.0, 0.01, 0.99, 1e-5)
    for name, value in expected.items():
        np.testing.assert_allclose(float(metrics[name]), value, rtol=1e-4, err_msg=name)
    assert (expected['linear_kl'] == pytest.approx(0.1)) == trust_region  # (the projection bit, or would have)
    for weight, value in zip(values(agent.model.weights), after):
        np.testing.assert_allclose(weight, value, rtol=1e-4, atol=1e-7)
    for moved, old, new in zip(values(agent.average.weights), average, values(agent.model.weights)):
        np.testing.assert_allclose(moved, 0.9 * old + 0.1 * new, rtol=1e-6, atol=1e-7)


def test_compiled_update_reads_the_average_network_as_it_is_at_each_call():
    """After a first update the average policy is made uniform (its kernel zeroed), which changes the trust
    region's KL gradient k = -average / pi: the second update must equal that of an agent built in that state
    before its first call, and the average then moves from the uniform one."""
    agent = acer()
    agent.train_step(*SEGMENT)
    uniform = [np.zeros_like(weight) for weight in values(agent.average.weights)]
    agent.average.set_weights(uniform)
    fresh = acer()
    fresh.model.set_weights(values(agent.model.weights))
    fresh.average.set_weights(uniform)
    for variable, value in zip(fresh.optimizer.variables, values(agent.optimizer.variables)):
        variable.assign(value)
    metrics, fresh_metrics = agent.train_step(*SEGMENT), fresh.train_step(*SEGMENT)
    for name, value in fresh_metrics.items():
        np.testing.assert_allclose(float(metrics[name]), float(value), rtol=1e-5, err_msg=name)
    for weight, expected in zip(values(agent.model.weights), values(fresh.model.weights)):
        np.testing.assert_allclose(weight, expected, rtol=1e-5, atol=1e-7)
    for moved, new in zip(values(agent.average.weights), values(agent.model.weights)):
        np.testing.assert_allclose(moved, 0.1 * new, rtol=1e-6, atol=1e-7)


def test_graph_variables_hold_the_average_network():
    agent = acer()
    tracked = {id(variable) for variable in agent.graph_variables()}
    expected = [*agent.average.variables, *agent.model.variables, *agent.optimizer.variables, agent.graph_random.state]
    assert all(id(variable) in tracked for variable in expected)

"""QR-DQN: the quantile Huber loss, a gradient step's loss and TD errors worked out by hand on a linear network,
the layout of the network's outputs (actions, then quantiles), dueling quantiles, and a learning run."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from xagents.envs.creation import create_envs
from xagents.maths.losses import quantile_huber_loss
from xagents.qrdqn import QRDQN
from xagents.tests.test_off_policy import dqn_batch, linear


def test_the_quantile_huber_loss_by_hand():
    # theta = (1, 2) at fractions (0.25, 0.75); targets (2.8, 4.6).
    # theta_0: u = 1.8, 3.6, huber 1.3, 3.1, weight |0.25 - 0| -> mean(0.325, 0.775) = 0.55
    # theta_1: u = 0.8, 2.6, huber 0.32, 2.1, weight 0.75 -> mean(0.24, 1.575) = 0.9075; sum 1.4575.
    # theta = (2, -3), targets (0, 0): theta_0: u = -2, huber 1.5, weight |0.25 - 1| -> 1.125;
    # theta_1: u = 3, huber 2.5, weight 0.75 -> 1.875; sum 3.
    loss = quantile_huber_loss(tf.constant([[1.0, 2], [2, -3]]), tf.constant([[2.8, 4.6], [0, 0]]))
    np.testing.assert_allclose(loss, [1.4575, 3.0], rtol=1e-6)


def test_the_quantile_huber_loss_is_least_at_the_targets_quantiles_at_the_midpoint_fractions():
    """Its minimiser is the targets' quantiles at (2i + 1) / 2N, not at 1 - those fractions (a flipped
    indicator): each estimate moved either way raises the loss. (The targets spread over a hundred times the Huber
    loss's quadratic zone, where it is the quantile loss.)"""
    targets = np.random.default_rng(0).exponential(100.0, 2000).astype(np.float32)  # skewed: tau, 1 - tau differ
    fractions = (np.arange(4) + 0.5) / 4
    best = np.quantile(targets, fractions).astype(np.float32)

    def loss(quantiles):
        return float(quantile_huber_loss(tf.constant(quantiles[None]), tf.constant(targets[None]))[0])

    for i in range(4):
        for shift in (-5, 5):
            moved = best.copy()
            moved[i] += shift
            assert loss(moved) > loss(best), (i, shift)
    assert loss(np.quantile(targets, 1 - fractions).astype(np.float32)) > loss(best)


def numpy_quantile_huber_loss(quantiles: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Dabney et al. 2018, eq. 10 (kappa = 1) in NumPy: for each of the N estimates theta_i (fraction (2i + 1) / 2N),
    the mean over the N' targets T_j of |tau_i - 1{u < 0}| huber(u), u = T_j - theta_i, then the sum over i."""
    n = quantiles.shape[1]
    fractions = (np.arange(n) + 0.5) / n
    loss = np.zeros(len(quantiles))
    for b in range(len(quantiles)):
        for i in range(n):
            u = targets[b] - quantiles[b, i]
            huber = np.where(np.abs(u) <= 1, 0.5 * u ** 2, np.abs(u) - 0.5)
            loss[b] += np.mean(np.abs(fractions[i] - (u < 0)) * huber)
    return loss


@pytest.mark.backends
def test_the_quantile_huber_loss_sums_over_estimates_and_averages_over_targets_when_their_numbers_differ():
    """Two estimates against three targets (TQC's kN targets are not N): theta = (1, 2) at (0.25, 0.75), targets
    (2.8, 4.6, 0.5). theta_0: u = 1.8, 3.6, -0.5, huber 1.3, 3.1, 0.125, weights 0.25, 0.25, 0.75:
    mean(0.325, 0.775, 0.09375) = 0.397917; theta_1: u = 0.8, 2.6, -1.5, huber 0.32, 2.1, 1, weights 0.75, 0.75, 0.25:
    mean(0.24, 1.575, 0.25) = 0.688333; loss 1.08625 (averaging over estimates and summing over targets: 1.629375).
    Then three estimates against five targets on random values, against the paper's equation."""
    loss = quantile_huber_loss(keras.ops.convert_to_tensor(np.array([[1.0, 2]], np.float32)),
                               keras.ops.convert_to_tensor(np.array([[2.8, 4.6, 0.5]], np.float32)))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loss), [1.08625], rtol=1e-6)
    rng = np.random.default_rng(0)
    quantiles, targets = rng.normal(size=(4, 3)) * 2, rng.normal(size=(4, 5)) * 2
    loss = quantile_huber_loss(keras.ops.convert_to_tensor(quantiles.astype(np.float32)),
                               keras.ops.convert_to_tensor(targets.astype(np.float32)))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loss), numpy_quantile_huber_loss(quantiles, targets),
                               rtol=1e-5)


def quantile_agent(double=False):
    # Outputs, actions then quantiles: online (a0: s0, s1; a1: s0 + s1, -s0); target (a0: s1, s1; a1: s0, 2 s0).
    online = np.array([[1, 0, 1, -1], [0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    target = np.array([[0, 0, 1, 2], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    agent = QRDQN(create_envs('CartPole-v1'), linear(4, online), n_quantiles=2, double=double,
                  buffer_initial_size=100, buffer_batch_size=32, quiet=True)
    for weight, value in zip(agent.target_model.weights, [target, np.zeros(4)]):
        weight.assign(value)
    return agent


@pytest.mark.parametrize('double, expected_loss, expected_td', [
    # s' = (2, 0.5): the target's quantiles a0 (0.5, 0.5), a1 (2, 4): a* = 1, T = 1 + 0.9 (2, 4) = (2.8, 4.6);
    # s' = (0, 4) terminated: T = (0, 0). Online theta(s, a) = (1, 2) and (2, -3): per-sample losses 1.4575 and 3
    # (the test above), weighted 1 and 0.5: loss = (1.4575 + 1.5) / 2; TD errors: means 1.5 - 3.7, -0.5 - 0.
    (False, 1.47875, [-2.2, -0.5]),
    # Double: the online net rates s' = (2, 0.5) a0 (2, 0.5) mean 1.25, a1 (2.5, -2) mean 0.25: a* = 0, whose target
    # quantiles are (0.5, 0.5): T = (1.45, 1.45). theta_0 = 1: u = 0.45, huber 0.10125 * 0.25;
    # theta_1 = 2: u = -0.55, huber 0.15125 * |0.75 - 1|: 0.063125. loss = (0.063125 + 1.5) / 2.
    (True, 0.7815625, [0.05, -0.5]),
])
def test_qrdqn_loss_and_td_errors_by_hand(double, expected_loss, expected_td):
    metrics, td_errors = quantile_agent(double).train_step(*dqn_batch())
    np.testing.assert_allclose(metrics['loss'], expected_loss, rtol=1e-6)
    np.testing.assert_allclose(td_errors, expected_td, rtol=1e-5, atol=1e-6)


def test_greedy_actions_maximise_the_mean_of_the_quantiles_in_numpy_and_in_the_graph():
    agent = quantile_agent()
    # s = (1, -3): a0 quantiles (1, -3) mean -1; a1 (-2, -1) mean -1.5: a0, though a1's least quantile is higher.
    # s = (1, 2): a0 (1, 2) mean 1.5; a1 (3, -1) mean 1: a0, though a1's greatest is higher.
    # s = (-1, 2): a0 (-1, 2) mean 0.5; a1 (1, 1) mean 1: a1.
    observations = np.array([[1, -3, 0, 0], [1, 2, 0, 0], [-1, 2, 0, 0]], np.float32)
    expected = [[-1, -1.5], [1.5, 1], [0.5, 1]]
    np.testing.assert_allclose(agent.q_values_np(observations), expected)
    np.testing.assert_allclose(agent.q_values(agent.model, tf.constant(observations)), expected)
    np.testing.assert_array_equal(agent.policy(observations), [0, 0, 1])


def test_dueling_quantiles_are_value_plus_centred_advantage():
    # V(s) quantiles (s0, s1); A(s) a0 (s2, 0), a1 (0, s3).
    value = np.eye(4, 2)
    advantage = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]], np.float32)
    agent = QRDQN(create_envs('CartPole-v1'), linear(4, value, advantage), n_quantiles=2, dueling=True,
                  buffer_initial_size=100, buffer_batch_size=32, quiet=True)
    # s = (1, 2, 4, 6): V = (1, 2); A: a0 (4, 0), a1 (0, 6), mean over actions (2, 3):
    # a0 (1 + 4 - 2, 2 + 0 - 3) = (3, -1), a1 (1 + 0 - 2, 2 + 6 - 3) = (-1, 5); Q = (1, 2).
    observations = np.array([[1, 2, 4, 6]], np.float32)
    np.testing.assert_allclose(agent.quantiles(agent.model, tf.constant(observations)), [[[3, -1], [-1, 5]]])
    np.testing.assert_allclose(agent.q_values_np(observations), [[1, 2]])


def test_dueling_with_a_preset_keeps_the_presets_widths_and_a_users_plain_cfg_is_refused(tmp_path):
    # The CartPole preset names ann-model-256.cfg; with dueling it becomes ann-dueling-256.cfg.
    agent = QRDQN.from_env('CartPole-v1', dueling=True, quiet=True)
    dense = [layer for layer in agent.model.layers if hasattr(layer, 'units')]
    assert [layer.units for layer in dense] == [256, 256, 10, 20]  # trunk, V's 10 quantiles, A's 2 x 10
    plain = tmp_path / 'plain.cfg'
    plain.write_text('[dense-1]\nunits=8\nactivation=relu\ncommon=1\n\n[dense-2]\noutput=1\n')
    with pytest.raises(ValueError, match=r'expected 2 output section\(s\) \(value, advantage\), got 1'):
        QRDQN(create_envs('CartPole-v1'), str(plain), dueling=True, quiet=True)


def test_n_quantiles_must_be_positive():
    with pytest.raises(ValueError, match='expected n_quantiles >= 1, got 0'):
        QRDQN(create_envs('CartPole-v1'), n_quantiles=0, buffer_initial_size=100, buffer_batch_size=32, quiet=True)


def test_qrdqn_learns_cartpole():
    agent = QRDQN.from_env('CartPole-v1', seed=0, quiet=True)
    run = agent.fit(target_reward=475, max_steps=40_000, eval_frequency=5000, eval_episodes=5, stop_on='eval')
    assert run.eval_reward >= 475, run.eval_reward

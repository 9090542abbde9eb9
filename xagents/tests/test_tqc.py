"""TQC: a gradient step's critic loss, actor loss and TD errors worked out by hand (the target quantiles pooled over
the critics, sorted and truncated) and against the paper's equations in NumPy on random critics, importance weights,
critics built from one head each, and refused settings."""
import importlib.resources
import math

import numpy as np
import pytest

from xagents.envs.creation import create_envs
from xagents.tests.test_off_policy import WEIGHTS, freeze, linear, tensors
from xagents.tqc import TQC


BATCH = ([[1, 2, 0], [0, -1, 0]], [[0.5], [-0.5]], [1, 2], [[0.5, 0.5, 0], [2, 1, 0]], [0.99, 0], [1, 1])
CRITIC_LOSS, TD_ERRORS, ACTOR_LOSS = 3.13083089, [1.40125201, -2.125], -(1.5 + 1.25 * math.tanh(0.5))


def tqc_agent() -> TQC:
    """log std = -20 makes the policy deterministic (a' = tanh(0.5) =: t) and the tiny fixed alpha drops the entropy
    terms. Two critics of two quantiles (fractions 0.25, 0.75) on (s, a): Z1 = (s0, s0 + a), Z2 = (s1 + a + 2,
    s1 + 3a + 2); the largest quantile of each critic's count is dropped from the pooled target (keep 2 of 4).
    Learning rate 0."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.5, -20.0]])
    critic = linear(4, np.array([[1, 1], [0, 0], [0, 0], [0, 1.0]]), np.array([[0, 0], [1, 1], [0, 0], [1, 3.0]]),
                    bias=[[0, 0], [2, 2]])
    agent = TQC(create_envs('Pendulum-v1'), actor, critic, alpha=1e-9, n_quantiles=2, top_quantiles_to_drop_per_net=1,
                buffer_initial_size=256, quiet=True)
    freeze(agent)
    return agent


def test_tqc_losses_by_hand():
    metrics, td_errors = tqc_agent().train_step(*tensors(*BATCH))
    t = math.tanh(0.5)
    # s' = (0.5, 0.5), a' = t: Z1 = (0.5, 0.5 + t), Z2 = (2.5 + t, 2.5 + 3t); pooled and sorted, the two smallest
    # (0.5, 0.96211716), both the first critic's (dropping each critic's top one would keep 0.5 and 2.96).
    # y = 1 + 0.99 (0.5, 0.96211716) = (1.495, 1.95249599) and, terminated, (2, 2).
    # Z(s, a): (1, 1.5), (4.5, 5.5) and (0, -0.5), (0.5, -0.5). Quantile Huber (sum over quantiles, mean over y):
    #   Z1, sample 1: 0.25 * mean(huber 0.495, 0.9525) + mean(0.25 * huber(-0.005), 0.75 * huber(0.4525)) = 0.1104098
    #   Z2, sample 1: every u < 0: 0.75 * mean(2.505, 2.0475) + 0.25 * mean(3.505, 3.0475) = 2.52625201
    #   Z1, sample 2: u = 2 and 2.5: 0.25 * 1.5 + 0.75 * 2 = 1.875; Z2, sample 2: 0.25 * 1 + 0.75 * 2 = 1.75
    # critic loss = (0.1104098 + 1.875) / 2 + (2.52625201 + 1.75) / 2 (per-critic truncation: 3.12019401)
    np.testing.assert_allclose(metrics['critic_loss'], CRITIC_LOSS, rtol=1e-5)
    # TD errors: means 12.5 / 4 - 1.72374799 and -0.5 / 4 - 2
    np.testing.assert_allclose(td_errors, TD_ERRORS, rtol=1e-5)
    # actor loss = -mean over samples of the mean of all four quantiles at (s, t): (10 + 5t) / 4 and (2 + 5t) / 4
    np.testing.assert_allclose(metrics['actor_loss'], ACTOR_LOSS, rtol=1e-5)
    assert ACTOR_LOSS == -(1.5 + 1.25 * t)


def test_tqc_weighs_each_sample_s_quantile_loss_by_its_importance_weight():
    """test_tqc_losses_by_hand's batch with importance weights (2, 0.5): each sample's quantile Huber losses (Z1:
    0.1104098 and 1.875, Z2: 2.52625201 and 1.75) are scaled by its weight; the TD errors are not."""
    metrics, td_errors = tqc_agent().train_step(*tensors(*BATCH[:-1], WEIGHTS))
    z1, z2 = np.array([0.1104098, 1.875]), np.array([2.52625201, 1.75])
    assert np.mean(z1) + np.mean(z2) == pytest.approx(CRITIC_LOSS)
    np.testing.assert_allclose(metrics['critic_loss'], np.mean(WEIGHTS * z1) + np.mean(WEIGHTS * z2), rtol=1e-5)
    np.testing.assert_allclose(td_errors, TD_ERRORS, rtol=1e-5)


def numpy_tqc_targets(batch, actor_kernel, actor_bias, kernels, dropped):
    """TQC's targets (entropy dropped): the linear critics' ``kernels`` quantiles at (s', tanh(s' W + b)), pooled per
    sample, sorted, the N d largest dropped, then r + discount * each kept one: ``(batch, N (M - d))``."""
    _, _, r, s_next, discounts, _ = (np.asarray(column, np.float64) for column in batch)
    a_next = np.tanh(s_next @ actor_kernel + actor_bias)
    pooled = np.concatenate([np.hstack([s_next, a_next]) @ kernel for kernel in kernels], axis=1)
    kept = np.sort(pooled, axis=1)[:, :len(kernels) * (kernels[0].shape[1] - dropped)]
    return r[:, None] + discounts[:, None] * kept


def numpy_tqc_update(batch, actor_kernel, actor_bias, critic_kernels, dropped):
    """TQC's update from the paper's equations (Kuznetsov et al. 2020, eqs. 10-12) in NumPy, for a deterministic
    policy a = tanh(s W + b) and linear critics Z_n(s, a) = (s, a) K_n (the entropy terms dropped): the critics'
    quantiles at (s', a') pooled per sample, sorted and the N d largest dropped; every estimate's quantile Huber loss
    summed over its M quantiles and averaged over the kept targets, weighted per sample and summed over critics."""
    s, a, r, s_next, discounts, weights = (np.asarray(column, np.float64) for column in batch)
    n_quantiles = critic_kernels[0].shape[1]
    targets = numpy_tqc_targets(batch, actor_kernel, actor_bias, critic_kernels, dropped)
    fractions = (np.arange(n_quantiles) + 0.5) / n_quantiles
    current = [np.hstack([s, a]) @ kernel for kernel in critic_kernels]
    critic_loss = 0.0
    for z in current:
        u = targets[:, None, :] - z[:, :, None]  # (batch, estimates, targets)
        huber = np.where(np.abs(u) <= 1, 0.5 * u ** 2, np.abs(u) - 0.5)
        rho = np.abs(fractions[None, :, None] - (u < 0)) * huber
        critic_loss += np.mean(weights * rho.mean(2).sum(1))
    td_errors = np.mean(current, axis=(0, 2)) - targets.mean(1)
    a_policy = np.tanh(s @ actor_kernel + actor_bias)
    actor_loss = -np.mean([np.hstack([s, a_policy]) @ kernel for kernel in critic_kernels])
    return critic_loss, td_errors, actor_loss


def numpy_tqc_critic_gradients(batch, actor_kernel, actor_bias, critic_kernels, target_kernels, dropped):
    """The gradients of TQC's critic loss (as in numpy_tqc_update, the targets from the target critics' kernels)
    with respect to each linear critic's kernel and bias: d rho / d theta_m = -|tau_m - 1{u < 0}| clip(u, -1, 1), so
    the loss's gradient at theta_n^m(s_b, a_b) is w_b / B mean_j of it, and no gradient reaches the targets."""
    s, a, r, s_next, discounts, weights = (np.asarray(column, np.float64) for column in batch)
    n_quantiles = critic_kernels[0].shape[1]
    targets = numpy_tqc_targets(batch, actor_kernel, actor_bias, target_kernels, dropped)
    fractions = (np.arange(n_quantiles) + 0.5) / n_quantiles
    inputs = np.hstack([s, a])
    gradients = []
    for kernel in critic_kernels:
        u = targets[:, None, :] - (inputs @ kernel)[:, :, None]  # (batch, estimates, targets)
        slope = -np.mean(np.abs(fractions[None, :, None] - (u < 0)) * np.clip(u, -1, 1), 2)
        at_estimates = weights[:, None] / len(s) * slope
        gradients += [inputs.T @ at_estimates, at_estimates.sum(0)]
    return gradients


def test_tqc_update_matches_the_papers_equations_on_random_critics():
    """Three critics of five quantiles, two dropped per critic (9 of 15 targets kept, so summing over estimates and
    averaging over targets differ from the reverse), on four non-terminal samples whose target quantiles differ (so
    pooling one sample's quantiles with another's shows)."""
    rng = np.random.default_rng(0)
    batch = (rng.normal(size=(4, 3)), rng.uniform(-1, 1, (4, 1)), rng.normal(size=4), rng.normal(size=(4, 3)),
             [0.99, 0.9, 0.5, 0.99], [1.0, 0.5, 2.0, 1.5])
    actor_kernel, actor_bias = rng.normal(size=(3, 1)) * 0.5, 0.2
    critic_kernels = [rng.normal(size=(4, 5)) for _ in range(3)]
    actor = linear(3, np.hstack([actor_kernel, np.zeros((3, 1))]), bias=[[actor_bias, -20.0]])
    critic = linear(4, *critic_kernels)
    agent = TQC(create_envs('Pendulum-v1'), actor, critic, alpha=1e-9, n_critics=3, n_quantiles=5,
                top_quantiles_to_drop_per_net=2, buffer_initial_size=256, quiet=True)
    agent.target_critic.set_weights(agent.critic.get_weights())
    freeze(agent)
    metrics, td_errors = agent.train_step(*tensors(*batch))
    critic_loss, expected_td_errors, actor_loss = numpy_tqc_update(batch, actor_kernel, actor_bias, critic_kernels, 2)
    np.testing.assert_allclose(metrics['critic_loss'], critic_loss, rtol=1e-4)
    np.testing.assert_allclose(td_errors, expected_td_errors, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], actor_loss, rtol=1e-4, atol=1e-5)


def test_critics_are_one_cfg_head_and_tower_per_critic():
    agent = TQC.from_env('Pendulum-v1', n_critics=3, n_quantiles=7, seed=0, quiet=True)
    assert [tuple(output.shape) for output in agent.critic.outputs] == [(None, 7)] * 3
    kernels = [weight for weight in agent.critic.weights if len(weight.shape) == 2]
    assert len(kernels) == 9 and len({id(kernel) for kernel in kernels}) == 9  # three towers of three layers
    assert agent.kept_quantiles == 3 * (7 - 2)


@pytest.mark.parametrize('settings, message', [
    ({'n_quantiles': 2, 'top_quantiles_to_drop_per_net': 2}, 'expected 0 <= top_quantiles_to_drop_per_net < '
                                                             'n_quantiles = 2, got 2'),
    ({'n_critics': 0}, 'expected n_critics >= 1, got 0'),
    ({'top_quantiles_to_drop_per_net': -1}, 'expected top_quantiles_to_drop_per_net >= 0, got -1'),
])
def test_refused_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        TQC(create_envs('Pendulum-v1'), buffer_initial_size=256, quiet=True, **settings)


def test_a_cfg_with_a_head_per_critic_must_have_as_many_as_there_are_critics():
    sac_critics = str(importlib.resources.files('xagents').joinpath('sac', 'models', 'ann-critic-256.cfg'))  # two
    agent = TQC(create_envs('Pendulum-v1'), critic_model=sac_critics, buffer_initial_size=256, quiet=True)
    assert len(agent.critic.outputs) == 2
    with pytest.raises(ValueError, match=r'expected 3 output section\(s\)'):
        TQC(create_envs('Pendulum-v1'), critic_model=sac_critics, n_critics=3, buffer_initial_size=256, quiet=True)

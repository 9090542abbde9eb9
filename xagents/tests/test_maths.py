"""Each agent's update maths through its real ``train_step``, on tiny networks with fixed weights, against values
worked out by hand in the comments: PPO's clipped objective and how its loss combines its terms, A2C's loss and
RMSProp step, TRPO's natural-gradient step and line search, ACER's losses, trust region and step, DDPG's targets,
importance weights and L2, TD3's target smoothing, SAC's entropy aim, and the soft targets of SAC, TQC and CrossQ.

Each case is chosen so that a plausible slip (a flipped sign, a swapped argument, a missing factor) changes a
checked number: the comments say which.
"""
import math

import keras
import numpy as np
import pytest

from xagents import A2C, PPO, SAC, TQC, CrossQ
from xagents.tests.test_off_policy import linear  # a Keras model of given kernels
from xagents.envs.creation import create_envs

pytestmark = pytest.mark.backends  # on each backend: every update against its maths by hand

LN3 = math.log(3.0)


# ------------------------------------------------------------------------------ PPO and A2C
# Logits (s0, s1), value s2. Four samples: logits (0, 0) -> pi = (1/2, 1/2); logits (ln 3, 0) -> pi = (3/4, 1/4).
ON_POLICY_OBSERVATIONS = np.array([[0, 0, 1, 0], [0, 0, 0, 0], [LN3, 0, 2, 0], [LN3, 0, -1, 0]], np.float32)
ON_POLICY_ACTIONS = np.array([0, 1, 1, 1])  # pi(a|s) = 1/2, 1/2, 1/4, 1/4
# V = s2 = 1, 0, 2, -1 and these returns: R - V = 1, 0, 0, 2, value loss (1 + 4) / 4 = 1.25.
RETURNS = np.array([2.0, 0.0, 2.0, 1.0], np.float32)
# Entropy: ln 2 = 0.69314718 twice, -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.56233514 twice: mean 0.62774116.
ENTROPY = 0.62774116


def actor_critic(agent_class, **settings):
    """``agent_class`` on CartPole (one env, 4 steps: one 4-sample batch) with the logits-and-value model above."""
    model = linear(4, np.eye(4, 2), np.eye(4, 1, -2))
    return agent_class(create_envs('CartPole-v1'), model, n_steps=4, **settings)


def tensors(*columns: np.ndarray) -> list:
    """A batch as the compiled update gets it (PyTorch's operators take no NumPy array beside a tensor)."""
    return [keras.ops.convert_to_tensor(column) for column in columns]


def weights_moved(agent, update) -> list[np.ndarray]:
    """The change of each of the agent's model weights (policy kernel, bias, value kernel, bias) by ``update()``."""
    before = [weight.numpy().copy() for weight in agent.model.weights]
    update()
    return [weight.numpy() - old for weight, old in zip(agent.model.weights, before)]


@pytest.mark.parametrize('normalize', [False, True])
def test_ppo_clipped_objective_value_loss_entropy_and_kl_by_hand(normalize):
    """Old probabilities 1/4, 0.4, 1/2, 1/2 give ratios r = 2, 1.25, 1/2, 1/2 (clip range 0.2: 1.2, 1.2, 0.8, 0.8);
    with advantages 1, -1, 2, -2 the pessimistic terms min(r A, clip(r) A) are
    1.2 (upper clip bites), -1.25, 1.0, -1.6 (lower clip bites): policy loss = -(-0.65) / 4 = 0.1625.
    (max instead of min: -0.35; the ratio inverted: 0.475; clipping at 1 + 2 eps: 0.1125.)
    Normalised advantages (mean 0, population std sqrt(2.5)) divide it by 1.58113883: 0.10277402.
    approx KL = mean(r - 1 - ln r) = (0.30685282 + 0.02685645 + 2 * 0.19314718) / 4 = 0.18000091
    ((r - 1 + ln r) would be -0.05500091)."""
    agent = actor_critic(PPO, mini_batches=1, ppo_epochs=1, normalize_advantages=normalize, entropy_coef=0.1)
    old_log_probs = np.log([0.25, 0.4, 0.5, 0.5]).astype(np.float32)
    advantages = np.array([1.0, -1.0, 2.0, -2.0], np.float32)
    metrics = agent.train_step(ON_POLICY_OBSERVATIONS, ON_POLICY_ACTIONS, old_log_probs, advantages, RETURNS)
    np.testing.assert_allclose(float(metrics['policy_loss']), 0.10277402 if normalize else 0.1625, rtol=1e-5)
    np.testing.assert_allclose(float(metrics['value_loss']), 1.25, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['entropy']), ENTROPY, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['approx_kl']), 0.18000091, rtol=1e-5)


@pytest.mark.parametrize('agent_class', [PPO, A2C])
def test_one_update_lowers_the_value_error_and_raises_the_entropy(agent_class):
    """The loss is policy_loss + value_loss_coef * value_loss - entropy_coef * entropy: its first optimizer step
    moves each weight against the sign of its gradient (Adam's first step is lr * sign(g); RMSProp's keeps the sign).

    Value head V = w . s: d value_loss / dw = -2/4 sum (R - V) s = -1/2 ((0, 0, 1, 0) + 2 (ln 3, 0, -1, 0))
    = (-ln 3, 0, 1/2, 0): w0 rises, w2 falls, w1 and w3 stay; its bias rises (sum (R - V) = 3 > 0).
    Zero advantages leave the entropy alone in the policy's gradient: at pi = (3/4, 1/4),
    dH/dz = -pi (ln pi + H) = (-0.20599, +0.20599), so the logit of action 0 falls where s0 = ln 3 (kernel [0, 0]
    falls, [0, 1] rises) and the samples at pi = (1/2, 1/2) add nothing."""
    settings = {'mini_batches': 1, 'ppo_epochs': 1, 'normalize_advantages': False} if agent_class is PPO else {}
    agent = actor_critic(agent_class, entropy_coef=0.1, **settings)
    log_probs = np.log([0.5, 0.5, 0.25, 0.25]).astype(np.float32)
    moved = weights_moved(agent, lambda: agent.train_step(ON_POLICY_OBSERVATIONS, ON_POLICY_ACTIONS, log_probs,
                                                          np.zeros(4, np.float32), RETURNS))
    policy_kernel, _, value_kernel, value_bias = moved
    np.testing.assert_array_equal(np.sign(value_kernel[:, 0]), [1, 0, -1, 0])
    assert value_bias[0] > 0
    assert policy_kernel[0, 0] < 0 < policy_kernel[0, 1]
    np.testing.assert_array_equal(policy_kernel[[1, 3]], 0.0)  # (s1 and s3 are 0 in every sample)


def test_a2c_loss_terms_by_hand():
    """log pi(a|s) = ln 1/2, ln 1/2, ln 1/4, ln 1/4 with advantages 1, 2, 2, 2: policy loss
    = -(3 ln 1/2 + 4 ln 1/4) / 4 = 1.90615475 (its sign flipped: -1.906...); the value loss regresses the returns
    (1.25), not the advantages (A - V = 0, 2, 0, 3: 3.25); entropy as above."""
    agent = actor_critic(A2C, entropy_coef=0.1)
    advantages = np.array([1.0, 2.0, 2.0, 2.0], np.float32)
    metrics = agent.train_step(ON_POLICY_OBSERVATIONS, ON_POLICY_ACTIONS, np.zeros(4, np.float32), advantages,
                               RETURNS)
    np.testing.assert_allclose(float(metrics['policy_loss']), 1.90615475, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['value_loss']), 1.25, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['entropy']), ENTROPY, rtol=1e-6)


def test_a2c_steps_rmsprop_on_value_loss_coef_times_the_value_loss():
    """With no entropy bonus, zero advantages and a clipping norm it does not reach, the value head's gradient is
    value_loss_coef * (-ln 3, 0, 1/2, 0) (see above; bias: 0.5 * -3/2) and TensorFlow 1's RMSProp, its mean squares
    starting at ones, steps each weight by -lr g / sqrt(0.99 + 0.01 g^2 + 1e-5)."""
    agent = actor_critic(A2C, entropy_coef=0.0, value_loss_coef=0.5, grad_norm=100.0, lr=0.01)
    moved = weights_moved(agent, lambda: agent.train_step(ON_POLICY_OBSERVATIONS, ON_POLICY_ACTIONS,
                                                          np.zeros(4, np.float32), np.zeros(4, np.float32), RETURNS))
    gradients = 0.5 * np.array([-LN3, 0, 0.5, 0]), 0.5 * np.array([-1.5])
    for change, gradient in zip(moved[2:], gradients):
        np.testing.assert_allclose(change.ravel(), -0.01 * gradient / np.sqrt(0.99 + 0.01 * gradient ** 2 + 1e-5),
                                   rtol=1e-4, atol=1e-9)
    np.testing.assert_array_equal(moved[0], 0.0)  # (no advantage, no entropy bonus: the policy stays)


# ------------------------------------------------------------------------------------- TRPO
def softmax(logits: np.ndarray) -> np.ndarray:
    exponentials = np.exp(logits - logits.max(-1, keepdims=True))
    return exponentials / exponentials.sum(-1, keepdims=True)


def trpo_step_by_hand(kernel, observations, actions, advantages, max_kl, damping, steps, shrink):
    """TRPO's policy step for a linear softmax policy ``logits = x W + b`` (b = 0), worked out exactly in float64:
    the Jacobian of the logits in the flat parameters (W row-major, then b), the Fisher matrix
    ``mean J^T (diag p - p p^T) J`` (the Hessian of KL(old || new) at old), its damped inverse applied to the
    surrogate's gradient ``mean A J^T (onehot(a) - p)``, the full step ``sqrt(2 max_kl / s.F s) s`` and the
    backtracking search. Returns ``(parameters, fraction, kl, surrogate gain)``."""
    n = kernel.shape[1]
    theta = np.concatenate([kernel.ravel(), np.zeros(n)]).astype(np.float64)

    def probabilities(parameters):
        return softmax(observations @ parameters[:kernel.size].reshape(kernel.shape) + parameters[kernel.size:])

    p = probabilities(theta)
    jacobians = np.stack([np.concatenate([np.kron(x[None], np.eye(n)), np.eye(n)], 1) for x in observations])
    gradient = np.mean(advantages[:, None] * np.einsum('bnp,bn->bp', jacobians, np.eye(n)[actions] - p), 0)
    curvature = np.stack([np.diag(row) - np.outer(row, row) for row in p])
    fisher = np.einsum('bnp,bnm,bmq->pq', jacobians, curvature, jacobians) / len(p) + damping * np.eye(len(theta))
    direction = np.linalg.solve(fisher, gradient)
    full_step = np.sqrt(2 * max_kl / (direction @ fisher @ direction)) * direction
    taken = np.arange(len(actions)), actions
    fraction = 1.0
    for _ in range(steps):
        q = probabilities(theta + fraction * full_step)
        kl = np.mean((p * (np.log(p) - np.log(q))).sum(-1))  # KL(old || new)
        gain = np.mean(q[taken] / p[taken] * advantages) - np.mean(advantages)
        if kl <= max_kl and gain > 0:
            return theta + fraction * full_step, fraction, kl, gain
        fraction *= shrink
    return theta, 0.0, 0.0, 0.0


@pytest.mark.parametrize('line_search_steps, fraction', [(10, 0.8), (1, 0.0)])
def test_trpo_natural_step_and_line_search_by_hand(line_search_steps, fraction):
    """max_kl 0.5, damping 0.01: the full step reaches KL(old || new) = 0.586 > 0.5 (the quadratic model
    underestimates it), so the search shrinks it once (0.8: KL 0.387, surrogate gain 1.927). With one try the step
    is refused and the policy stays as it was. A reversed KL, a surrogate of log-probabilities instead of ratios,
    the damping subtracted, a step without the 2 in sqrt(2 max_kl / s.F s), another shrink factor or an 'or' in
    the acceptance test each change a checked number."""
    from xagents.trpo import TRPO

    kernel = np.array([[2, -1], [0, 1.5], [1, 0], [0, 0]], np.float32)
    observations = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0]], np.float32)
    actions, advantages = np.array([0, 1, 1, 0]), np.array([1.0, -0.5, 2.0, -1.0], np.float32)
    agent = TRPO(create_envs('CartPole-v1'), linear(4, kernel), linear(4, np.zeros((4, 1))), n_steps=4,
                 mini_batches=1, critic_iterations=1, normalize_advantages=False, max_kl=0.5, cg_damping=0.01,
                 cg_iterations=10, line_search_steps=line_search_steps, line_search_shrink=0.8)
    metrics = agent.train_step(observations, actions, np.zeros(4, np.float32), advantages, np.zeros(4, np.float32))
    expected, expected_fraction, kl, gain = trpo_step_by_hand(kernel.astype(np.float64), observations, actions,
                                                              advantages, 0.5, 0.01, line_search_steps, 0.8)
    assert expected_fraction == fraction
    np.testing.assert_allclose(float(metrics['step_fraction']), fraction, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['kl']), kl, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(metrics['surrogate_gain']), gain, rtol=1e-4, atol=1e-7)
    parameters = np.concatenate([variable.numpy().ravel() for variable in agent.actor.trainable_variables])
    np.testing.assert_allclose(parameters, expected, atol=2e-5)


# ------------------------------------------------------------------------------------- ACER
def acer_update_by_hand(policy_kernel, q_kernel, observations, actions, rewards, dones, behaviour, gamma, c,
                        entropy_coef, value_loss_coef, delta, grad_norm, lr, rho_decay, rms_epsilon):
    """ACER's update (algorithm 2 of Wang et al. 2016, as Baselines computes it) of the linear model
    ``logits = x P``, ``Q = x K`` (biases 0) on one segment of one env, in float64: Retrace, the truncated
    importance-sampled gain with its bias correction, the trust region around the (still identical) average
    policy, the gradients through the softmax, clipping at ``grad_norm`` and TensorFlow 1's RMSProp (mean squares
    start at ones). Returns the metrics and the weights ``(P, p_bias, K, q_bias)`` after it."""
    eps = 1e-6
    x = observations[:, 0].astype(np.float64)  # (T + 1, F)
    probs_all, q_all = softmax(x @ policy_kernel), x @ q_kernel
    values_all = (probs_all * q_all).sum(-1)
    probs, q, values, steps = probs_all[:-1], q_all[:-1], values_all[:-1], len(actions)
    taken = np.arange(steps), actions[:, 0]
    rhos = probs / (behaviour[:, 0] + eps)
    q_retrace, target = np.zeros(steps), values_all[-1]
    for t in reversed(range(steps)):
        target = rewards[t, 0] + gamma * (1 - dones[t, 0]) * target
        q_retrace[t] = target
        target = min(1.0, rhos[taken][t]) * (target - q[taken][t]) + values[t]
    log_probs = np.log(probs + eps)
    weight = np.minimum(c, rhos[taken]) * (q_retrace - values)
    correction_weights = np.maximum(0.0, 1 - c / (rhos + eps)) * probs * (q - values[:, None])
    entropy = -(probs * log_probs).sum(-1)
    metrics = {'policy_loss': -np.mean(log_probs[taken] * weight + (log_probs * correction_weights).sum(-1)),
               'q_loss': 0.5 * np.mean((q_retrace - q[taken]) ** 2), 'entropy': np.mean(entropy)}
    # d objective / d probs (the weights are constants): through log(p + eps) and the entropy bonus.
    g = correction_weights / (probs + eps) + entropy_coef * (-log_probs - probs / (probs + eps))
    g[taken] += weight / (probs[taken] + eps)
    k = -probs / (probs + eps)  # -average / pi, the average network still the model
    scale = np.maximum(0.0, ((k * g).sum(-1, keepdims=True) - delta) / (k * k).sum(-1, keepdims=True))
    z = g - scale * k
    metrics['linear_kl'] = (k * z).sum(-1).max()
    # Back through the softmax: d loss / d logits = (diag p - p p^T)(-z / T), per step.
    logit_gradients = np.einsum('tij,tj->ti', np.stack([np.diag(p) - np.outer(p, p) for p in probs]), -z / steps)
    q_gradients = np.zeros_like(q)
    q_gradients[taken] = -value_loss_coef * (q_retrace - q[taken]) / steps
    gradients = [x[:-1].T @ logit_gradients, logit_gradients.sum(0), x[:-1].T @ q_gradients, q_gradients.sum(0)]
    norm = np.sqrt(sum((gradient ** 2).sum() for gradient in gradients))
    metrics['gradient_norm'] = norm
    gradients = [gradient * min(1.0, grad_norm / norm) for gradient in gradients]
    weights = [policy_kernel, np.zeros(policy_kernel.shape[1]), q_kernel, np.zeros(q_kernel.shape[1])]
    after = [w - lr * gradient / np.sqrt(rho_decay + (1 - rho_decay) * gradient ** 2 + rms_epsilon)
             for w, gradient in zip(weights, gradients)]
    return metrics, after


def test_acer_losses_trust_region_and_step_by_hand():
    """Two steps of one env, then the bootstrap observation; importance_c = 1.2 so that truncation bites:
    pi(x0) = (3/4, 1/4) against mu = (1/2, 1/2): rho = (1.5, 0.5), the taken action 0 has its weight cut to 1.2 and
    the correction weighs action 0 by 1 - 1.2 / 1.5 = 0.2; pi(x1) = (1/2, 1/2) against mu = (0.8, 0.2):
    rho = (0.625, 2.5), the taken action 1 has its weight cut to 1.2, its Retrace factor to 1, and the correction
    weighs it by 1 - 1.2 / 2.5 = 0.52. Rewards -1, -2 give negative advantages, where delta = 0.1 makes the trust
    region bite; the gradient's norm (1.053) is clipped to 1. A flipped sign of the KL gradient k, of the projection
    or of the correction, an untruncated weight or Retrace factor, Retrace without rho, or a Q loss on V instead of
    Q(x, a) each change the losses or the step."""
    from xagents.acer import ACER

    policy_kernel = np.array([[LN3, 0], [0, 0], [0, LN3], [0, 0]])
    q_kernel = np.array([[1.0, 2.0], [0.0, -1.0], [2.0, 1.0], [0, 0]])
    model = linear(4, policy_kernel, q_kernel)
    settings = {'importance_c': 1.2, 'delta': 0.1, 'entropy_coef': 0.01, 'value_loss_coef': 0.5, 'grad_norm': 1.0,
                'lr': 0.01, 'rmsprop_alpha': 0.99, 'rmsprop_epsilon': 1e-5}
    agent = ACER(create_envs('CartPole-v1'), model, n_steps=2, buffer_initial_size=1, ema_alpha=0.9, **settings)
    observations = np.eye(4, dtype=np.float32)[:3, None]  # x0, x1, x2: (T + 1, 1, 4)
    actions = np.array([[0], [1]])
    rewards, dones = np.array([[-1.0], [-2.0]], np.float32), np.zeros((2, 1), np.float32)
    behaviour = np.array([[[0.5, 0.5]], [[0.8, 0.2]]], np.float32)
    metrics = agent.train_step(observations, actions, rewards, dones, behaviour)
    expected, after = acer_update_by_hand(policy_kernel, q_kernel, observations, actions, rewards, dones, behaviour,
                                          agent.gamma, 1.2, 0.01, 0.5, 0.1, 1.0, 0.01, 0.99, 1e-5)
    for name, value in expected.items():
        np.testing.assert_allclose(float(metrics[name]), value, rtol=1e-4, err_msg=name)
    assert expected['linear_kl'] == pytest.approx(0.1)  # (the projection bit)
    for weight, value in zip(agent.model.weights, after):
        np.testing.assert_allclose(weight.numpy(), value, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------- DDPG, TD3
def tanh_actor(action: float) -> keras.Model:
    """An actor that outputs ``action`` everywhere (tanh of a constant bias) on Pendulum's 3 observations."""
    return linear(3, np.zeros((3, 1)), bias=[[math.atanh(action)]], activation='tanh')


def test_ddpg_bootstraps_from_the_target_actor_weighs_errors_by_importance_and_decays_only_kernels():
    """Q = s0 + 2a + 1; the target actor says a' = -0.25 (the online one 0.5, which must not be used).
    s = (1, 0, 0), (2, 0, 0); a = 0.5, -1; r = 1, 0; s' = (0, 0, 0), (1, 0, 0); discounts 0.9; weights 1, 0.5.
    y = 1 + 0.9 (0 - 0.5 + 1), 0 + 0.9 (1 - 0.5 + 1) = 1.45, 1.35; Q(s, a) = 3, 1: td = 1.55, -0.35;
    critic loss = mean(1 * 2.4025, 0.5 * 0.1225) + 0.01 * (1 + 4) (L2 on the kernel, not the bias) = 1.281875
    (without the weights 1.3125; with the bias decayed too 1.291875; with a' from the online actor y = 2.8, 2.7)."""
    from xagents.ddpg import DDPG

    critic = linear(4, np.array([[1], [0], [0], [2.0]]), bias=[[1.0]])
    agent = DDPG(create_envs('Pendulum-v1'), tanh_actor(0.5), critic, critic_l2=0.01, buffer_initial_size=256)
    agent.target_actor.set_weights(tanh_actor(-0.25).get_weights())
    for optimizer in agent.optimizers.values():
        optimizer.learning_rate.assign(0.0)
    batch = [np.asarray(column, np.float32) for column in (
        [[1, 0, 0], [2, 0, 0]], [[0.5], [-1]], [1, 0], [[0, 0, 0], [1, 0, 0]], [0.9, 0.9], [1, 0.5])]
    metrics, td_errors = agent.train_step(*tensors(*batch))
    np.testing.assert_allclose(td_errors, [1.55, -0.35], rtol=1e-5)
    np.testing.assert_allclose(float(metrics['critic_loss']), 1.281875, rtol=1e-5)


def test_td3_smooths_the_target_action_with_clipped_noise_and_takes_the_smaller_critic():
    """The target actor says 0.9; smoothing noise of std 100 clipped to +-0.5 makes a' = clip(0.9 +- 0.5, -1, 1),
    0.4 or 1.0, drawn per sample. Twin critics Q1 = a, Q2 = 2a: the smaller is a for a > 0. With s, a, r = 0 and
    discount 1 the target is min Q(s', a') = a' and each TD error -a'. (Unclipped noise gives a' = +-1, unclipped
    actions 1.4, the larger critic 0.8 and 2.)"""
    from xagents.td3 import TD3

    critic = linear(4, np.array([[0], [0], [0], [1.0]]), np.array([[0], [0], [0], [2.0]]))
    agent = TD3(create_envs('Pendulum-v1'), tanh_actor(0.9), critic, policy_noise_coef=100.0, noise_clip=0.5,
                buffer_initial_size=256, seed=0)
    batch = 200
    zeros = np.zeros((batch, 3), np.float32)
    _, td_errors = agent.train_step(*tensors(zeros, np.zeros((batch, 1), np.float32), np.zeros(batch, np.float32),
                                             zeros, np.ones(batch, np.float32), np.ones(batch, np.float32)))
    next_actions = -keras.ops.convert_to_numpy(td_errors)
    lower = np.isclose(next_actions, 0.4, atol=1e-5)
    # (a draw within 0.005 of zero, about 0.4% of them, lands between the two)
    assert ((next_actions > 0.4 - 1e-5) & (next_actions < 1.0 + 1e-5)).all(), np.unique(next_actions.round(4))
    assert (lower | np.isclose(next_actions, 1.0, atol=1e-5)).mean() > 0.97, np.unique(next_actions.round(4))
    assert 0.3 < lower.mean() < 0.7  # each sample draws its own noise


# -------------------------------------------------------------------------------------- SAC
@pytest.mark.parametrize('env_id, target_entropy', [('Pendulum-v1', -1.0), ('CartPole-v1', 0.89 * math.log(2))])
def test_sac_aims_at_its_default_entropy_and_its_alpha_loss_pulls_towards_it(env_id, target_entropy):
    """By default SAC aims at an entropy of -dim(A) for Box actions (Haarnoja et al. 2018) and 0.89 ln n for n
    discrete ones (CleanRL's; Christodoulou 2019 aims at 0.98 ln n); alpha's loss is -log(alpha) (E[log pi] + target) = -ln 2 (target - H)
    at alpha = 2, H the entropy the same update reports."""
    agent = SAC.from_env(env_id, initial_alpha=2.0, buffer_initial_size=256, seed=0)
    assert agent.target_entropy == pytest.approx(target_entropy)
    observations = np.random.default_rng(0).normal(size=(8, agent.observation_space.shape[0])).astype(np.float32)
    actions = (np.zeros(8, np.int64) if agent.discrete else np.zeros((8, 1), np.float32))
    ones = np.ones(8, np.float32)
    metrics, _ = agent.train_step(*tensors(observations, actions, ones, observations, 0.9 * ones, ones))
    entropy = float(metrics['entropy'])
    np.testing.assert_allclose(float(metrics['alpha']), 2.0, rtol=1e-6)
    np.testing.assert_allclose(float(metrics['alpha_loss']), -math.log(2.0) * (target_entropy - entropy), rtol=1e-4)


@pytest.mark.parametrize('algorithm', [SAC, TQC, CrossQ], ids=lambda algorithm: algorithm.__name__)
def test_box_soft_targets_subtract_alpha_times_the_next_log_probability(algorithm):
    """A policy of mean 0 and log std -20 acts a' = tanh(0 + e^-20 n) ~ 0 with log pi(a'|s') = -0.5 n^2 + 20
    - 0.5 ln 2 pi (the tanh correction is 0 at u = 0): E[log pi] = 20 - 0.91893853 - 0.5 = 18.58106147.
    Every Q (SAC, CrossQ) or quantile (TQC: two critics of two, one dropped per critic) is 0, r = 0, discount 1 and
    alpha 0.1: each target is -0.1 log pi(a'|s') and its TD error +0.1 log pi; over 512 samples their mean is 1.858
    (about 0.003 from it: the standard error of 0.05 n^2), where adding the entropy term instead would give -1.858.
    SAC's and TQC's targets read their target critics, CrossQ's its critics."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.0, -20.0]])
    units, settings = (2, {'n_quantiles': 2, 'top_quantiles_to_drop_per_net': 1}) if algorithm is TQC else (1, {})
    critic = linear(4, np.zeros((4, units)), np.zeros((4, units)))
    agent = algorithm(create_envs('Pendulum-v1'), actor, critic, alpha=0.1, buffer_initial_size=256, seed=0,
                      **settings)
    agent.target_critic.set_weights(agent.critic.get_weights())
    zeros, ones = np.zeros((512, 3), np.float32), np.ones(512, np.float32)
    _, td_errors = agent.train_step(*tensors(zeros, np.zeros((512, 1), np.float32), 0 * ones, zeros, ones, ones))
    np.testing.assert_allclose(float(np.mean(keras.ops.convert_to_numpy(td_errors))), 0.1 * 18.58106147, atol=0.02)

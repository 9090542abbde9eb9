"""The shared graph maths in ``keras.ops`` against values worked out by hand or with NumPy and SciPy, on small fixed
inputs: distributions (Categorical, DiagGaussian, MultiCategorical, MultiBernoulli, gSDE's log std), masked
logits, and normalised and encoded observations. Each function runs eagerly and compiled (``tf.function`` on
TensorFlow, ``jax.jit`` on JAX), so the same file checks both backends:
``KERAS_BACKEND=jax python -m pytest xagents/tests/test_ops_maths.py``."""
import gymnasium as gym
import keras
import numpy as np
import pytest
from keras import ops
from scipy import special, stats

from xagents.agent.observing import Observing
from xagents.maths.distributions import Categorical, DiagGaussian, StateDependentNoise
from xagents.envs.masks import MASKED_LOGIT, masked_logits
from xagents.maths.multi_distributions import MultiBernoulli, MultiCategorical

pytestmark = pytest.mark.backends

BACKEND = keras.backend.backend()


def compiled(fn):
    """``fn`` compiled as agents compile their updates on the running backend."""
    if BACKEND == 'jax':
        import jax

        return jax.jit(fn)
    if BACKEND == 'torch':  # PyTorch runs agents' updates eagerly
        return fn
    import tensorflow as tf

    return tf.function(fn, autograph=False)


def both(fn, *args) -> list[np.ndarray]:
    """``fn(*args)`` eagerly and compiled, as NumPy arrays; they agree to float32 rounding."""
    args = [ops.convert_to_tensor(arg) if isinstance(arg, np.ndarray) else arg for arg in args]
    eager, graph = (ops.convert_to_numpy(run(*args)) for run in (fn, compiled(fn)))
    np.testing.assert_allclose(graph, eager, rtol=1e-6, atol=1e-6)
    return eager


def gradient(fn, x: np.ndarray) -> np.ndarray:
    """The gradient of ``sum(fn(x))`` with respect to ``x``, on the running backend."""
    if BACKEND == 'jax':
        import jax

        return np.asarray(jax.grad(lambda value: ops.sum(fn(value)))(ops.convert_to_tensor(x)))
    if BACKEND == 'torch':
        import torch

        value = torch.tensor(x, requires_grad=True)
        total = ops.sum(fn(value))
        if not total.requires_grad:  # fn does not depend on x
            return np.zeros_like(x)
        (grad,) = torch.autograd.grad(total, value, allow_unused=True)
        return np.zeros_like(x) if grad is None else grad.numpy()
    import tensorflow as tf

    variable = tf.Variable(x)
    with tf.GradientTape() as tape:
        total = ops.sum(fn(variable))
    return tape.gradient(total, variable, unconnected_gradients=tf.UnconnectedGradients.ZERO).numpy()


def assert_action_dtype(actions: np.ndarray) -> None:
    """Modes are int64 on TensorFlow and PyTorch, as exports give them (JAX without x64 has int32 at most)."""
    assert actions.dtype == (np.int32 if BACKEND == 'jax' else np.int64), actions.dtype


LOGITS = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], np.float32)  # (B=2, n=3): not square, rows differ
OLD_LOGITS = np.array([[0.0, 0.5, -0.5], [2.0, 0.0, 1.0]], np.float32)


def test_categorical_log_prob_entropy_kl_and_mode():
    categorical = Categorical(gym.spaces.Discrete(3))
    log_p = special.log_softmax(LOGITS.astype(np.float64), -1)
    old_log_p = special.log_softmax(OLD_LOGITS.astype(np.float64), -1)
    actions = np.array([0, 2])
    np.testing.assert_allclose(both(categorical.log_prob, LOGITS, actions), log_p[[0, 1], actions], rtol=1e-5)
    np.testing.assert_allclose(both(categorical.entropy, LOGITS), stats.entropy(np.exp(log_p), axis=-1), rtol=1e-5)
    np.testing.assert_allclose(both(categorical.kl, OLD_LOGITS, LOGITS),
                               stats.entropy(np.exp(old_log_p), np.exp(log_p), axis=-1), rtol=1e-5)
    # By hand: two equal logits are a fair coin.
    np.testing.assert_allclose(both(categorical.log_prob, np.zeros((1, 2), np.float32), np.array([1])), [-np.log(2)],
                               rtol=1e-6)
    modes = both(categorical.mode, LOGITS)
    np.testing.assert_array_equal(modes, [1, 2])
    assert_action_dtype(modes)
    # The first of equal logits, -0.0 and 0.0 included, as acting in NumPy picks.
    ties = np.array([[-0.0, 0.0, -1.0], [1.0, 3.0, 3.0]], np.float32)
    np.testing.assert_array_equal(both(categorical.mode, ties), ties.argmax(-1))


def test_diagonal_gaussian_log_prob_entropy_and_kl():
    gaussian = DiagGaussian(gym.spaces.Box(-1, 1, (2,)))
    mean = np.array([[0.0, 1.0], [0.5, -2.0]], np.float32)
    actions = np.array([[0.3, 0.0], [1.5, -1.0]], np.float32)
    log_std = np.array([-0.5, 0.2], np.float32)  # state-independent (d,)
    per_sample = np.array([[0.1, -1.0], [0.4, 0.0]], np.float32)  # gSDE's (B, d)
    for stds in (log_std, per_sample):
        expected = stats.norm.logpdf(actions, mean, np.exp(stds)).sum(-1)
        np.testing.assert_allclose(both(gaussian.log_prob, mean, stds, actions), expected, rtol=1e-5)
        entropy = stats.norm.entropy(mean * 0, np.exp(stds)).sum(-1)
        np.testing.assert_allclose(both(gaussian.entropy, mean, stds), entropy, rtol=1e-5)
    # KL(old || new) of normals: log(s/s0) + (s0^2 + (m0 - m)^2) / (2 s^2) - 1/2 per dimension.
    old_mean = np.array([[1.0, 0.0], [0.0, 0.0]], np.float32)
    old_std, std = np.exp(per_sample.astype(np.float64)), np.exp(np.float64(log_std))
    kl = (np.log(std / old_std) + (old_std**2 + (old_mean - mean) ** 2) / (2 * std**2) - 0.5).sum(-1)
    np.testing.assert_allclose(both(gaussian.kl, old_mean, per_sample, mean, log_std), kl, rtol=1e-5)
    np.testing.assert_allclose(both(gaussian.kl, mean, log_std, mean, log_std), [0, 0], atol=1e-6)
    np.testing.assert_array_equal(both(gaussian.mode, mean), mean)


def test_multi_categorical_sums_the_sub_spaces_and_ignores_the_padding():
    space = gym.spaces.MultiDiscrete([3, 2, 4])  # padded to 4 entries each
    multi = MultiCategorical(space)
    logits = np.array([[1.0, 2.0, 0.5, 0.3, -0.3, 0.0, 1.0, 2.0, -1.0],
                       [0.0, -1.0, 3.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
    old_logits = logits[::-1].copy()

    def parts(flat):  # each sub-space's log-probabilities, worked out apart
        return [special.log_softmax(flat[:, start:stop].astype(np.float64), -1)
                for start, stop in ((0, 3), (3, 5), (5, 9))]

    actions = np.array([[2, 1, 0], [0, 0, 3]])
    log_p, old_log_p = parts(logits), parts(old_logits)
    expected = sum(part[[0, 1], actions[:, i]] for i, part in enumerate(log_p))
    np.testing.assert_allclose(both(multi.log_prob, logits, actions), expected, rtol=1e-5)
    entropy = sum(stats.entropy(np.exp(part), axis=-1) for part in log_p)
    np.testing.assert_allclose(both(multi.entropy, logits), entropy, rtol=1e-5)
    kl = sum(stats.entropy(np.exp(old), np.exp(new), axis=-1) for old, new in zip(old_log_p, log_p))
    np.testing.assert_allclose(both(multi.kl, old_logits, logits), kl, rtol=1e-5, atol=1e-7)
    modes = both(multi.mode, logits)
    np.testing.assert_array_equal(modes, [[1, 0, 2], [2, 0, 0]])  # ties: the first
    assert_action_dtype(modes)


def test_multi_bernoulli_log_prob_entropy_kl_mode_and_gradient_at_zero():
    bernoulli = MultiBernoulli(gym.spaces.MultiBinary(3))
    logits = np.array([[0.5, -1.0, 2.0], [0.0, 50.0, -3.0]], np.float32)  # 50: exp(50) would overflow a naive form
    old_logits = np.array([[0.0, 1.0, -1.0], [1.0, 2.0, 0.5]], np.float32)
    bits = np.array([[1, 0, 1], [0, 0, 1]], np.int8)
    p, old_p = special.expit(logits.astype(np.float64)), special.expit(old_logits.astype(np.float64))
    log_p = np.where(bits, special.log_expit(logits.astype(np.float64)),
                     special.log_expit(-logits.astype(np.float64))).sum(-1)
    np.testing.assert_allclose(both(bernoulli.log_prob, logits, bits), log_p, rtol=1e-5)
    assert log_p[1] < -50  # bit 0 at logit 50
    entropy = (stats.entropy(np.stack([p, 1 - p]), axis=0)).sum(-1)
    np.testing.assert_allclose(both(bernoulli.entropy, logits), entropy, rtol=1e-5, atol=1e-6)
    log_q, log_not_q = special.log_expit(logits.astype(np.float64)), special.log_expit(-logits.astype(np.float64))
    kl = (old_p * (np.log(old_p) - log_q) + (1 - old_p) * (np.log(1 - old_p) - log_not_q)).sum(-1)
    np.testing.assert_allclose(both(bernoulli.kl, old_logits, logits), kl, rtol=1e-5)
    modes = both(bernoulli.mode, logits)
    np.testing.assert_array_equal(modes, [[1, 0, 1], [0, 1, 0]])
    assert_action_dtype(modes)
    # d log p / d logit = bit - sigmoid(logit): 0.5 and -0.5 at logit 0 (where |x| has no slope).
    zeros = np.zeros((1, 2), np.float32)
    np.testing.assert_allclose(gradient(lambda x: bernoulli.log_prob(x, np.array([[1, 0]])), zeros), [[0.5, -0.5]])


def test_gsde_sigma_and_log_std():
    log_sigma = np.array([[-1.0, 0.0], [0.5, 2.0], [0.0, -0.5]], np.float32)  # (F=3, d=2)
    features = np.array([[1.0, 2.0, -1.0], [0.0, 0.5, 3.0]], np.float32)  # (B=2, F=3)
    np.testing.assert_allclose(both(StateDependentNoise.sigma, log_sigma), np.exp(log_sigma), rtol=1e-6)
    # expln by hand: exp up to 0, log1p(x + 1e-6) + 1 above.
    expln = both(lambda value: StateDependentNoise.sigma(value, expln=True), log_sigma)
    np.testing.assert_allclose(expln[1], [np.log(1.5 + 1e-6) + 1, np.log(3 + 1e-6) + 1], rtol=1e-6)
    np.testing.assert_allclose(expln[[0, 2]], np.exp(log_sigma[[0, 2]]), rtol=1e-6)
    # std^2 of action j = sum_i f_i^2 sigma_ij^2 (+ 1e-6): row 0, action 0 is 1 e^-2 + 4 e^1 + 1.
    expected = 0.5 * np.log(features.astype(np.float64) ** 2 @ np.exp(2.0 * log_sigma) + 1e-6)
    log_std = both(StateDependentNoise.log_std, features, log_sigma)
    np.testing.assert_allclose(log_std, expected, rtol=1e-5)
    np.testing.assert_allclose(log_std[0, 0], 0.5 * np.log(np.exp(-2) + 4 * np.e + 1 + 1e-6), rtol=1e-6)
    np.testing.assert_allclose(log_std, StateDependentNoise.log_std_np(features, log_sigma), rtol=1e-6)
    # The features learn only with learn_features (SAC), not through PPO's and A2C's log std.
    assert not gradient(lambda f: StateDependentNoise.log_std(f, log_sigma), features).any()
    learned = gradient(lambda f: StateDependentNoise.log_std(f, log_sigma, learn_features=True), features)
    std2 = features.astype(np.float64) ** 2 @ np.exp(2.0 * log_sigma) + 1e-6  # d/df_i sum_j 0.5 log std2_j
    np.testing.assert_allclose(learned, (features[:, :, None] * np.exp(2.0 * log_sigma) / std2[:, None, :]).sum(-1),
                               rtol=1e-5)


def test_masked_logits_forbid_the_masked_actions():
    categorical = Categorical(gym.spaces.Discrete(3))
    masks = np.array([[True, False, True], [False, False, True]])
    for given in (masks, masks.astype(np.int8)):
        masked = both(masked_logits, LOGITS, given)
        np.testing.assert_array_equal(masked, np.where(masks, LOGITS, np.float32(MASKED_LOGIT)))
        assert masked.dtype == np.float32
    assert masked_logits(LOGITS, None) is LOGITS
    # Renormalised over the allowed actions: row 0 is softmax(1, 0.5); row 1 has one action, certain.
    log_p = both(lambda logits, m: categorical.log_prob(masked_logits(logits, m), np.array([0, 2])), LOGITS, masks)
    np.testing.assert_allclose(log_p, [1 - np.logaddexp(1, 0.5), 0], atol=1e-6)
    entropy = both(lambda logits, m: categorical.entropy(masked_logits(logits, m)), LOGITS, masks)
    np.testing.assert_allclose(entropy, [stats.entropy(special.softmax([1.0, 0.5])), 0], atol=1e-6)
    # Row 0's largest logit (action 1) is masked.
    np.testing.assert_array_equal(both(lambda logits, m: categorical.mode(masked_logits(logits, m)), LOGITS, masks),
                                  [0, 2])


def observing(space: gym.Space, mean: np.ndarray, var: np.ndarray) -> Observing:
    """An agent's observation side with normalisation statistics set to ``mean`` and ``var``."""
    agent = Observing()
    agent.setup_observations(space, normalize_observations=True)
    agent.observation_stats.mean, agent.observation_stats.var = mean, var
    return agent


def test_normalized_observations_scale_clip_and_leave_one_hot_codes():
    box = observing(gym.spaces.Box(-100, 100, (3,)), np.array([1.0, -2.0, 0.0]), np.array([4.0, 1.0, 0.01]))
    observations = np.array([[3.0, -2.0, 0.05], [1.0, 0.0, 5.0]], np.float32)
    # (x - mean) / sqrt(var + 1e-8), clipped to +-10: 5 / 0.1 is 50, so 10.
    expected = [[1.0, 0.0, 0.05 / np.sqrt(0.01 + 1e-8)], [0.0, 2.0, 10.0]]
    normalized = both(box.normalized_graph, observations)
    np.testing.assert_allclose(normalized, expected, rtol=1e-5)
    np.testing.assert_allclose(normalized, box.normalized(observations), rtol=1e-6)

    # The Box key and the grid (a uint8 image too small for the Nature CNN) are scaled; the one-hot code passes as
    # it is (pictures too: see test_dict_observations).
    space = gym.spaces.Dict({'camera': gym.spaces.Box(0, 255, (1, 1, 2), np.uint8), 'mode': gym.spaces.Discrete(3),
                             'position': gym.spaces.Box(-5, 5, (2,))})
    keys = observing(space, np.array([100.0, 0.0, 1.0, -1.0]), np.array([100.0, 1.0, 4.0, 0.25]))  # camera, position
    packed = keys.encoded({'camera': np.array([[[[200, 0]]], [[[3, 255]]]], np.uint8), 'mode': np.array([2, 0]),
                           'position': np.array([[3.0, -1.0], [1.0, -2.0]], np.float32)})
    normalized = both(keys.normalized_graph, packed)
    np.testing.assert_allclose(normalized, [[10.0, 0, 0, 0, 1, 1.0, 0.0], [-9.7, 10.0, 1, 0, 0, 0.0, -2.0]],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(normalized, keys.normalized(packed), rtol=1e-6)


def test_encoded_dict_observations_one_hot_discrete_keys_from_their_start():
    space = gym.spaces.Dict({'grid': gym.spaces.MultiDiscrete([2, 3]), 'mode': gym.spaces.Discrete(3, start=-1),
                             'position': gym.spaces.Box(-5, 5, (2,))})
    agent = Observing()
    agent.setup_observations(space, normalize_observations=False)
    batch = {'grid': np.array([[1, 2], [0, 0]]), 'mode': np.array([-1, 1]),
             'position': np.array([[0.5, -1.5], [2.0, 3.0]], np.float32)}
    encoded = both(agent.encoded_graph, batch)
    # grid: 2 + 3 one-hot entries, mode: 3 from -1, position as it is.
    np.testing.assert_array_equal(encoded, [[0, 1, 0, 0, 1, 1, 0, 0, 0.5, -1.5],
                                            [1, 0, 1, 0, 0, 0, 0, 1, 2.0, 3.0]])
    np.testing.assert_array_equal(encoded, agent.encoded(batch))
    assert encoded.dtype == np.float32
    box = Observing()
    box.setup_observations(gym.spaces.Box(-1, 1, (2,)), normalize_observations=False)
    observations = np.ones((1, 2), np.float32)
    assert box.encoded_graph(observations) is observations

"""Action distributions against closed forms computed independently with NumPy and SciPy."""
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from scipy import special, stats

from xagents.maths.distributions import Categorical, DiagGaussian, StateDependentNoise, distribution_for

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(0, 2, (6, 4)).astype(np.float32)
OTHER_LOGITS = RNG.normal(0, 2, (6, 4)).astype(np.float32)
MEAN = RNG.normal(0, 1, (6, 3)).astype(np.float32)
OTHER_MEAN = RNG.normal(0, 1, (6, 3)).astype(np.float32)
LOG_STD = np.array([-0.5, 0.0, 0.7], np.float32)
OTHER_LOG_STD = np.array([0.3, -0.2, 0.1], np.float32)


def probabilities(logits):
    return special.softmax(logits.astype(np.float64), axis=-1)


def test_categorical_log_prob_entropy_and_kl_match_closed_forms():
    distribution = Categorical(gym.spaces.Discrete(4))
    actions = np.array([0, 1, 2, 3, 3, 1])
    p, q = probabilities(LOGITS), probabilities(OTHER_LOGITS)
    np.testing.assert_allclose(distribution.log_prob(LOGITS, actions), np.log(p[np.arange(6), actions]),
                               rtol=1e-5)
    np.testing.assert_allclose(distribution.entropy(LOGITS), stats.entropy(p, axis=-1), rtol=1e-5)
    # KL(p || q) = sum p log(p / q): scipy's relative entropy.
    np.testing.assert_allclose(distribution.kl(LOGITS, OTHER_LOGITS), stats.entropy(p, q, axis=-1), rtol=1e-4)
    assert np.allclose(distribution.kl(LOGITS, LOGITS), 0, atol=1e-6)


def test_categorical_samples_follow_the_probabilities_and_report_their_log_probs():
    distribution = Categorical(gym.spaces.Discrete(4))
    logits = np.repeat(LOGITS[:1], 40_000, axis=0)
    actions, log_probs = distribution.sample_np(logits, np.random.default_rng(1))
    p = probabilities(LOGITS[0])
    frequencies = np.bincount(actions, minlength=4) / len(actions)
    np.testing.assert_allclose(frequencies, p, atol=0.01)  # binomial std < 0.0025
    np.testing.assert_allclose(log_probs, np.log(p[actions]), rtol=1e-5)
    greedy, _ = distribution.sample_np(LOGITS, np.random.default_rng(1), deterministic=True)
    np.testing.assert_array_equal(greedy, LOGITS.argmax(-1))


def test_gaussian_log_prob_entropy_and_kl_match_closed_forms():
    distribution = DiagGaussian(gym.spaces.Box(-1, 1, (3,), np.float32))
    actions = RNG.normal(0, 1, (6, 3)).astype(np.float32)
    std, other_std = np.exp(LOG_STD.astype(np.float64)), np.exp(OTHER_LOG_STD.astype(np.float64))
    expected = stats.norm.logpdf(actions, MEAN, std).sum(-1)
    np.testing.assert_allclose(distribution.log_prob(MEAN, LOG_STD, actions), expected, rtol=1e-5)
    np.testing.assert_allclose(distribution.entropy(MEAN, LOG_STD), np.full(6, stats.norm.entropy(0, std).sum()),
                               rtol=1e-5)
    # KL of two normals per dimension: log(s2 / s1) + (s1^2 + (m1 - m2)^2) / (2 s2^2) - 1/2.
    kl = (np.log(other_std / std) + (std ** 2 + (MEAN - OTHER_MEAN) ** 2) / (2 * other_std ** 2) - 0.5).sum(-1)
    np.testing.assert_allclose(distribution.kl(MEAN, LOG_STD, OTHER_MEAN, OTHER_LOG_STD), kl, rtol=1e-4)


def test_gaussian_kl_agrees_with_a_monte_carlo_estimate():
    distribution = DiagGaussian(gym.spaces.Box(-1, 1, (3,), np.float32))
    std, other_std = np.exp(LOG_STD.astype(np.float64)), np.exp(OTHER_LOG_STD.astype(np.float64))
    x = np.random.default_rng(2).normal(MEAN[0], std, (200_000, 3))
    estimate = (stats.norm.logpdf(x, MEAN[0], std) - stats.norm.logpdf(x, OTHER_MEAN[0], other_std)).sum(-1).mean()
    exact = float(distribution.kl(MEAN[:1], LOG_STD, OTHER_MEAN[:1], OTHER_LOG_STD)[0])
    assert estimate == pytest.approx(exact, abs=0.02)


def test_gaussian_samples_have_the_mean_and_std_and_report_their_log_probs():
    distribution = DiagGaussian(gym.spaces.Box(-1, 1, (3,), np.float32))
    mean = np.repeat(MEAN[:1], 50_000, axis=0)
    actions, log_probs = distribution.sample_np(mean, LOG_STD, np.random.default_rng(3))
    np.testing.assert_allclose(actions.mean(0), MEAN[0], atol=0.03)
    np.testing.assert_allclose(actions.std(0), np.exp(LOG_STD), rtol=0.02)
    expected = stats.norm.logpdf(actions, MEAN[0], np.exp(LOG_STD.astype(np.float64))).sum(-1)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(distribution.clip(np.array([[-3.0, 0.5, 9.0]])), [[-1.0, 0.5, 1.0]])


def test_graph_mode_gives_the_same_values():
    distribution = Categorical(gym.spaces.Discrete(4))
    graph = tf.function(lambda logits, other: (distribution.entropy(logits), distribution.kl(logits, other)))
    entropy, kl = graph(tf.constant(LOGITS), tf.constant(OTHER_LOGITS))
    p, q = probabilities(LOGITS), probabilities(OTHER_LOGITS)
    np.testing.assert_allclose(entropy, stats.entropy(p, axis=-1), rtol=1e-5)
    np.testing.assert_allclose(kl, stats.entropy(p, q, axis=-1), rtol=1e-4)


def test_gsde_computes_in_float32_from_bfloat16_features():
    """A bf16 model's features (a Keras model of one's own may give them) are squared and multiplied in float32:
    the log std and the noise are float32 and as float64 gives them to float32's precision."""
    import ml_dtypes

    features = np.abs(RNG.normal(0, 2, (64, 32))).astype(ml_dtypes.bfloat16)
    log_sigma = RNG.normal(0, 1, (32, 3)).astype(np.float32)
    exact = 0.5 * np.log(features.astype(np.float64) ** 2 @ np.exp(2 * log_sigma.astype(np.float64)) + 1e-6)
    log_std = StateDependentNoise.log_std_np(features, log_sigma)
    graph_log_std = StateDependentNoise.log_std(tf.constant(features), tf.constant(log_sigma))
    assert log_std.dtype == np.float32 and graph_log_std.dtype == tf.float32
    np.testing.assert_allclose(log_std, exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(graph_log_std, exact, rtol=1e-6, atol=1e-6)
    sde = StateDependentNoise()
    noise = sde.noise(features, log_sigma, np.random.default_rng(0))
    exact_noise = np.einsum('bf,bfa->ba', features.astype(np.float64), sde.matrices.astype(np.float64))
    assert noise.dtype == np.float32
    np.testing.assert_allclose(noise, exact_noise, rtol=1e-5, atol=1e-5)


def test_distribution_for_refuses_other_spaces():
    assert isinstance(distribution_for(gym.spaces.Discrete(3)), Categorical)
    assert isinstance(distribution_for(gym.spaces.Box(-1, 1, (2,))), DiagGaussian)
    with pytest.raises(ValueError, match='expected a Discrete, Box, MultiDiscrete or MultiBinary action space'):
        distribution_for(gym.spaces.Tuple([gym.spaces.Discrete(2)]))

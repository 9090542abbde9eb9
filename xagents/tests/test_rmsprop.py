"""RMSProp as TensorFlow 1 (and so OpenAI Baselines' A2C and ACER) computes it."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from xagents import A2C, ACER
from xagents.maths.rmsprop import RMSpropTF1


def tensorflow1_rmsprop(initial: np.ndarray, gradients: list[np.ndarray], lr: float, rho: float,
                        epsilon: float) -> np.ndarray:
    """TF1's ``ApplyRMSProp`` with momentum 0 (the ``ms`` slot starts at ones), in float64."""
    theta, ms = initial.astype(np.float64), np.ones_like(initial, np.float64)
    for g in gradients:
        ms = rho * ms + (1 - rho) * g ** 2
        theta = theta - lr * g / np.sqrt(ms + epsilon)
    return theta


def apply(optimizer: tf.keras.optimizers.Optimizer, initial: np.ndarray, gradients: list[np.ndarray]) -> np.ndarray:
    """The variable after ``optimizer`` applies ``gradients`` in turn, each in one XLA-compiled call."""
    variable = tf.Variable(initial)
    optimizer.build([variable])
    step = tf.function(lambda g: optimizer.apply_gradients([(g, variable)]), jit_compile=True)
    for g in gradients:
        step(tf.constant(g))
    return variable.numpy()


def test_matches_tensorflow1_over_several_steps():
    rng = np.random.default_rng(0)
    initial = rng.normal(size=(3, 4)).astype(np.float32)
    # Gradients of several scales, so that the ones the average starts from matter differently.
    gradients = [(rng.normal(size=(3, 4)) * scale).astype(np.float32) for scale in (0.01, 0.1, 1.0, 3.0, 0.05, 0.5)]
    expected = tensorflow1_rmsprop(initial, gradients, lr=0.01, rho=0.99, epsilon=1e-5)
    got = apply(RMSpropTF1(0.01, rho=0.99, epsilon=1e-5), initial, gradients)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    # Keras' RMSprop (the average starts at zeros) lands elsewhere: the reference tells them apart.
    keras = apply(tf.keras.optimizers.RMSprop(0.01, rho=0.99, epsilon=1e-5), initial, gradients)
    assert np.abs(keras - expected).max() > 0.1


def first_update(optimizer: tf.keras.optimizers.Optimizer, kernel: tf.Variable, gradient: float) -> float:
    """The change of ``kernel[0, 0]`` (set to 0) when ``optimizer`` applies ``gradient`` to it alone."""
    kernel.assign(tf.tensor_scatter_nd_update(kernel, [[0, 0]], [0.0]))
    g = tf.tensor_scatter_nd_update(tf.zeros_like(kernel), [[0, 0]], [gradient])
    optimizer.apply_gradients([(g, kernel)])
    return float(kernel.numpy()[0, 0])


def test_a2c_first_update_is_baselines():
    """Baselines' A2C: lr 7e-4, decay 0.99, epsilon 1e-5, gradients clipped to a global norm of 0.5.
    A gradient of 10 on one weight is clipped to 0.5, then 7e-4 * 0.5 / sqrt(0.99 + 0.01 * 0.25 + 1e-5)
    = 3.5132e-4 (Keras' RMSprop: 7e-4 * 0.5 / sqrt(0.01 * 0.25 + 1e-5) = 6.99e-3)."""
    agent = A2C.from_env('Acrobot-v1', seed=0, quiet=True)  # no preset changes the optimizer's defaults
    kernel = agent.model.trainable_variables[0]
    assert first_update(agent.optimizer, kernel, 10.0) == pytest.approx(-3.5132e-4, rel=1e-4)


def test_acer_first_update_is_baselines():
    """Baselines' ACER: lr 7e-4, decay 0.99, epsilon 1e-5. A gradient of 0.1 on one weight moves it by
    7e-4 * 0.1 / sqrt(0.99 + 0.01 * 0.01 + 1e-5) = 7.0349e-5 (Keras' RMSprop: 6.67e-3, 95 times more)."""
    agent = ACER.from_env('Acrobot-v1', seed=0, quiet=True)  # no preset changes the optimizer's defaults
    kernel = agent.model.trainable_variables[0]
    assert first_update(agent.optimizer, kernel, 0.1) == pytest.approx(-7.0349e-5, rel=1e-4)


def test_checkpoint_round_trip_keeps_the_squared_gradient_average(workdir):
    agent = A2C.from_env('CartPole-v1', n_envs=2, seed=0, checkpoints=['a2c.tf'], quiet=True)
    agent.fit(max_steps=200)
    agent.save_models()
    other = A2C.from_env('CartPole-v1', n_envs=2, seed=1, quiet=True)
    other.load_weights(['a2c.tf'])
    saved, loaded = agent.optimizer.variables, other.optimizer.variables
    averages = [variable.numpy() for variable in saved if variable.name.endswith('mean_square')]
    assert len(averages) == len(agent.model.trainable_variables)
    assert not any(np.allclose(average, 1.0) for average in averages)  # trained away from the ones it starts at
    assert len(saved) == len(loaded)
    for mine, theirs in zip(saved, loaded):
        np.testing.assert_array_equal(theirs.numpy(), mine.numpy())

"""precision='bf16': hidden layers compute in bfloat16 on float32 weights; the update stays close to float32's."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from xagents import DQN, PPO, backend


def atari_batch(agent, size: int = 64, seed: int = 0):
    """Real Pong frame stacks (random play), random actions and old log-probabilities of ``agent``'s policy."""
    rng = np.random.default_rng(seed)
    envs = agent.envs
    observations, _ = envs.reset(seed=seed)
    frames = []
    while len(frames) * envs.num_envs < size:
        observations, *_ = envs.step(rng.integers(0, envs.single_action_space.n, envs.num_envs))
        frames.append(observations)
    observations = np.concatenate(frames)[:size]
    actions = rng.integers(0, envs.single_action_space.n, size)
    params, _ = agent.policy_value(ops.convert_to_tensor(observations))
    old_log_probs, _ = agent.log_prob_entropy(params, ops.convert_to_tensor(actions))
    advantages = rng.normal(size=size).astype(np.float32)
    returns = rng.normal(size=size).astype(np.float32)
    old_log_probs = ops.convert_to_numpy(old_log_probs) - 0.05
    return [ops.convert_to_tensor(value) for value in (observations, actions, old_log_probs, advantages, returns)]


def loss_and_gradients(agent, batch):
    """The PPO loss of ``batch`` and its gradients, in float32 NumPy, on whichever backend runs."""
    (loss, _), gradients = backend.value_and_grad(lambda: agent.minibatch_loss(*batch), agent.model.trainable_variables)
    assert all(keras.backend.standardize_dtype(gradient.dtype) == 'float32' for gradient in gradients)
    return float(loss), [ops.convert_to_numpy(gradient) for gradient in gradients]


@pytest.mark.backends
def test_a_bf16_update_is_within_tolerance_of_the_float32_one():
    exact = PPO.from_env('PongNoFrameskip-v4', n_envs=2, seed=0, quiet=True)
    fast = PPO.from_env('PongNoFrameskip-v4', n_envs=2, seed=0, quiet=True, precision='bf16')
    fast.model.set_weights(exact.model.get_weights())
    hidden = [layer for layer in fast.model.layers if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    assert [layer.compute_dtype for layer in hidden[:4]] == ['bfloat16'] * 4  # the Nature CNN and its dense layer
    assert [layer.compute_dtype for layer in hidden[4:]] == ['float32'] * 2  # policy and value heads
    assert all(weight.dtype == 'float32' for weight in fast.model.weights)
    assert all(keras.backend.standardize_dtype(output.dtype) == 'float32'
               for output in fast.model(np.zeros((1, 84, 84, 4), np.uint8)))
    batch = atari_batch(exact, 256)  # one rollout: 128 steps of 2 envs
    loss, gradients = loss_and_gradients(exact, batch)
    fast_loss, fast_gradients = loss_and_gradients(fast, batch)
    # (PyTorch's bf16 CPU kernels round more: 1.8e-3 of the loss measured there)
    assert abs(fast_loss - loss) < (3e-3 if keras.backend.backend() == 'torch' else 1e-3) * abs(loss)
    flat = np.concatenate([gradient.ravel() for gradient in gradients])
    fast_flat = np.concatenate([gradient.ravel() for gradient in fast_gradients])
    assert flat @ fast_flat / (np.linalg.norm(flat) * np.linalg.norm(fast_flat)) > 0.99
    for gradient, fast_gradient in zip(gradients[::2], fast_gradients[::2]):  # each kernel
        a, b = gradient.ravel(), fast_gradient.ravel()
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.9
    # bfloat16's rounding moves the gradient far less than sampling does: the float32 gradients of the two
    # halves of the batch differ over ten times more (measured: 50 times; 9.8 times on PyTorch, five times more).
    halves = [np.concatenate([g.ravel() for g in loss_and_gradients(exact, [c[:128] for c in part])[1]])
              for part in (batch, [c[128:] for c in batch])]
    times = 5 if keras.backend.backend() == 'torch' else 10
    assert np.linalg.norm(flat - fast_flat) < np.linalg.norm(halves[0] - halves[1]) / times
    # Through a whole update (16 Adam steps on one rollout) the policy moves where float32's does: the two
    # updated policies differ far less than either differs from the policy before.
    start = policy(exact, batch[0])
    exact.train_step(*batch)
    fast.train_step(*batch)
    updated, fast_updated = policy(exact, batch[0]), policy(fast, batch[0])
    # (Measured: 0.04 times with the minibatch orders of the agents' seeded graph stream, 0.0075 with another draw of
    # them: the orders set how far 16 Adam steps go. A bf16 update that went elsewhere would be near 1.)
    assert kl(updated, fast_updated) < 0.1 * kl(updated, start)


def policy(agent, observations) -> np.ndarray:
    """The action probabilities of ``agent``'s policy (float32)."""
    return ops.convert_to_numpy(ops.softmax(agent.policy_value(observations)[0])).astype(np.float64)


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """Mean KL(p || q) over a batch of categorical distributions."""
    return float(np.mean(np.sum(p * np.log(p / q), axis=-1)))


def sde_log_probs(features, log_sigma, mean, actions) -> np.ndarray:
    """gSDE's Gaussian log-probabilities of ``actions``, worked out in float64 from the given features."""
    f, sigma = np.asarray(features, np.float64), np.exp(np.asarray(log_sigma, np.float64))
    std = np.sqrt(f ** 2 @ sigma ** 2 + 1e-6)
    z = (np.asarray(actions, np.float64) - np.asarray(mean, np.float64)) / std
    return -0.5 * (z ** 2).sum(-1) - np.log(std).sum(-1) - 0.5 * z.shape[-1] * np.log(2 * np.pi)


def test_bf16_gsde_log_probs_are_float32_ones_of_its_features():
    """The hidden layers compute in bfloat16, gSDE's features leave the model and enter its noise and log-probs
    in float32: acting's and the update's log-probs are those of the features to float32's precision (in
    bfloat16 the features squared moved them by ~3e-3)."""
    agent = PPO.from_env('Pendulum-v1', seed=0, quiet=True, precision='bf16', use_sde=True, log_std_init=0.5)
    assert agent.model.layers[1].compute_dtype == 'bfloat16'
    assert [output.dtype for output in agent.model.outputs] == ['float32'] * 3  # means, value, features
    observations = np.random.default_rng(0).uniform(-1, 1, (256, 3)).astype(np.float32)
    (mean, features), _ = agent.forward(observations)
    actions, log_probs = agent.sample_actions((mean, features))
    log_sigma = agent.model.log_std.numpy()
    np.testing.assert_allclose(log_probs, sde_log_probs(features, log_sigma, mean, actions), rtol=0, atol=2e-6)

    @tf.function
    def update_log_probs(observations, actions):  # as the update computes them
        params, _ = agent.policy_value(observations)
        return agent.log_prob_entropy(params, actions)[0], params

    graph_log_probs, (graph_mean, graph_features) = update_log_probs(observations, actions)
    np.testing.assert_allclose(graph_log_probs, sde_log_probs(graph_features, log_sigma, graph_mean, actions),
                               rtol=0, atol=2e-6)
    np.testing.assert_allclose(graph_log_probs, log_probs, rtol=0, atol=2e-6)


@pytest.mark.backends
def test_bf16_saves_and_loads_and_small_networks_act_in_numpy_only_in_float32(tmp_path):
    agent = DQN.from_env('CartPole-v1', seed=0, quiet=True, precision='bf16', buffer_initial_size=64)
    assert agent.models['model'].layers[1].compute_dtype == 'bfloat16'
    assert agent.acting(agent.models['model']).numpy is None  # acting runs the bf16 model itself
    agent.fit(max_steps=128)
    agent.save(str(tmp_path / 'saved'))
    loaded = DQN.load(str(tmp_path / 'saved'))
    assert loaded.precision == 'bf16' and loaded.models['model'].layers[1].compute_dtype == 'bfloat16'
    observation = np.zeros((1, 4), np.float32)
    np.testing.assert_array_equal(agent.predict(observation)[0], loaded.predict(observation)[0])


@pytest.mark.parametrize('path', ['policy', 'policy.tflite', 'policy.onnx'])
def test_a_bf16_agent_exports_a_float32_policy_every_runtime_takes(tmp_path, path):
    from xagents.storage.export import load_exported

    agent = PPO.from_env('Pendulum-v1', seed=0, quiet=True, precision='bf16')
    exact = PPO.from_env('Pendulum-v1', seed=0, quiet=True)
    exact.model.set_weights(agent.model.get_weights())
    path = agent.export(str(tmp_path / path))
    observations = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    np.testing.assert_allclose(load_exported(path)(observations), exact.predict(observations)[0], rtol=1e-5, atol=1e-7)
    assert agent.model.layers[1].compute_dtype == 'bfloat16'  # the agent itself still computes in bf16
    assert not np.allclose(agent.predict(observations)[0], exact.predict(observations)[0], rtol=1e-5, atol=1e-7)


def test_an_unknown_precision_is_refused_in_one_line(xagents_cli, workdir):
    with pytest.raises(ValueError, match="precision takes float32 or bf16, got 'fp16'"):
        PPO.from_env('CartPole-v1', precision='fp16', quiet=True)
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '10', '--precision', 'fp16')
    assert status == 2 and len(err.strip().splitlines()) == 1 and 'precision takes float32 or bf16' in err


@pytest.mark.backends
def test_bf16_batch_renormalisation_keeps_float32_statistics_and_follows_the_float32_critic():
    from xagents import CrossQ
    from xagents.networks.batch_renorm import BatchRenorm

    exact = CrossQ.from_env('Pendulum-v1', seed=0, quiet=True, buffer_initial_size=256)
    fast = CrossQ.from_env('Pendulum-v1', seed=0, quiet=True, buffer_initial_size=256, precision='bf16')
    fast.critic.set_weights(exact.critic.get_weights())
    renorms = [layer for layer in fast.critic._flatten_layers() if isinstance(layer, BatchRenorm)]
    assert renorms and all(layer.compute_dtype == 'bfloat16' for layer in renorms)
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(256, 3)).astype(np.float32)
    actions = rng.uniform(-1, 1, (256, 1)).astype(np.float32)
    for training in (False, True):  # the running statistics, then the batch's (which the call also takes in)
        q, fast_q = (ops.convert_to_numpy(agent.q_values(agent.critic, observations, actions, training=training))
                     for agent in (exact, fast))
        assert np.abs(fast_q - q).max() < 0.02 * np.abs(q).max() + 1e-3
    exact_renorms = [layer for layer in exact.critic._flatten_layers() if isinstance(layer, BatchRenorm)]
    for layer, exact_layer in zip(renorms, exact_renorms):
        assert all(weight.dtype == 'float32' for weight in layer.weights if weight.name != 'steps')
        np.testing.assert_allclose(ops.convert_to_numpy(layer.moving_mean),
                                   ops.convert_to_numpy(exact_layer.moving_mean), rtol=0.02, atol=0.02)
        assert not np.allclose(ops.convert_to_numpy(layer.moving_mean), 0)  # it took the batch in
    fast.fit(max_steps=300, quiet=True)  # random steps up to 256, then 50 gradient steps in one call
    updates = int(ops.convert_to_numpy(fast.gradient_updates))
    assert updates >= 50 and all(int(ops.convert_to_numpy(layer.steps)) == 1 + updates for layer in renorms)
    assert all(np.isfinite(ops.convert_to_numpy(weight)).all() for weight in fast.critic.weights)

"""DQN, QR-DQN, DDPG, TD3, SAC, TQC and CrossQ on whichever Keras backend runs (``KERAS_BACKEND``: tensorflow, the default, or jax).

Each agent's update maths goes through its real compiled update (``compiled_train_steps``, one gradient step) on the
tiny fixed-weight networks of ``test_off_policy`` and ``test_maths``, against the values worked out by hand there;
the compiled update must read the variables as they are at each call and write back what it assigns (on JAX a
variable left out of ``graph_variables`` would be a constant of the compilation). Every agent and variant trains,
saves and loads, and each learns its env to a stated reward within a short budget.
"""
import math

import keras
import numpy as np
import pytest
from keras import ops

from xagents.crossq import CrossQ
from xagents.ddpg import DDPG
from xagents.dqn import DQN
from xagents.qrdqn import QRDQN
from xagents.sac import SAC
from xagents.td3 import TD3
from xagents.tqc import TQC
from xagents.tests.test_maths import tanh_actor
from xagents.tests.test_off_policy import changed, filled, freeze, linear, weights
from xagents.tests.test_qrdqn import quantile_agent
from xagents.tests import test_crossq, test_tqc
from xagents.envs.creation import create_envs

pytestmark = pytest.mark.backends


def columns(*arrays, actions=None) -> list[np.ndarray]:
    """A batch as the buffer gives it: float32 columns, the actions (second) as given."""
    batch = [np.asarray(array, np.float32) for array in arrays]
    return batch if actions is None else [batch[0], np.asarray(actions), *batch[1:]]


def compiled_step(agent, *batch, **masks) -> tuple[dict[str, float], np.ndarray]:
    """One gradient step of ``batch`` through the agent's compiled update: its metrics and TD errors ``(batch,)``."""
    metrics, td_errors = agent.compiled_train_steps(*(column[None] for column in batch),
                                                    **{name: mask[None] for name, mask in masks.items()})
    return {name: float(value) for name, value in metrics.items()}, ops.convert_to_numpy(td_errors)[0]


# ----------------------------------------------------------------------------------- DQN
def dqn_batch() -> list[np.ndarray]:
    """test_off_policy's: s = (1, 2, 0, 0), (3, -1, 0, 0); a = 0, 1; r = 1, 0; s' = (2, 0.5, 0, 0), (0, 4, 0, 0);
    discounts 0.9 and 0; importance weights 1 and 0.5."""
    return columns([[1, 2, 0, 0], [3, -1, 0, 0]], [1, 0], [[2, 0.5, 0, 0], [0, 4, 0, 0]], [0.9, 0], [1, 0.5],
                   actions=np.array([0, 1], np.int64))


def dqn_agent(**settings) -> DQN:
    """Online Q(s) = (s0, s1), target Q(s) = (s1, s0), learning rate 0."""
    agent = DQN(create_envs('CartPole-v1'), linear(4, np.eye(4, 2)), buffer_initial_size=100,
                buffer_batch_size=32, quiet=True, **settings)
    for weight, value in zip(agent.target_model.weights, [np.array([[0, 1], [1, 0], [0, 0], [0, 0]]), np.zeros(2)]):
        weight.assign(value)
    freeze(agent)
    return agent


@pytest.mark.parametrize('double, loss, td_errors', [(False, 0.775, [-1.8, -1]), (True, 0.175625, [-0.45, -1])])
def test_dqn_compiled_step_by_hand(double, loss, td_errors):
    """The worked case of test_off_policy.test_dqn_loss_by_hand, through the compiled update."""
    agent = dqn_agent(double=double)
    metrics, errors = compiled_step(agent, *dqn_batch())
    np.testing.assert_allclose(metrics['loss'], loss, rtol=1e-6)
    np.testing.assert_allclose(errors, td_errors, rtol=1e-6)
    np.testing.assert_allclose(metrics['q'], 0.0, atol=1e-7)  # Q(s, a) = 1, -1
    assert int(agent.gradient_updates.numpy()) == 1


def test_dqn_compiled_step_reads_the_target_network_as_it_is_at_each_call():
    """Doubling the target network after a first call: y = 1 + 0.9 * 2 * 2 = 4.6, 0; td = -3.6, -1;
    huber = 3.1, 0.5; loss = (3.1 + 0.25) / 2 = 1.675 (a compilation that kept the first weights gives 0.775)."""
    agent = dqn_agent()
    compiled_step(agent, *dqn_batch())
    agent.target_model.weights[0].assign(2 * agent.target_model.weights[0].numpy())
    metrics, errors = compiled_step(agent, *dqn_batch())
    np.testing.assert_allclose(errors, [-3.6, -1], rtol=1e-6)
    np.testing.assert_allclose(metrics['loss'], 1.675, rtol=1e-6)


def test_dqn_masked_target_takes_the_best_allowed_next_action():
    """With action 0 masked in s' the target takes Q_targ(s', 1) = s'0 = 2, 0: y = 2.8, 0 as unmasked (there the
    max is at action 1 too); masking action 1 instead gives Q_targ(s', 0) = 0.5, 4: y = 1.45, 0 and td = -0.45, -1."""
    agent = dqn_agent()
    allowed = np.ones((2, 2), bool)
    next_allowed = np.array([[True, False], [True, False]])
    _, errors = compiled_step(agent, *dqn_batch(), action_masks=allowed, next_action_masks=next_allowed)
    np.testing.assert_allclose(errors, [-0.45, -1], rtol=1e-6)


def test_dqn_target_is_a_hard_copy_every_target_update_interval_gradient_steps():
    """Real updates (learning rate 2.3e-3): the online network moves every gradient step, the target copies it
    exactly at the 3rd and 6th only."""
    agent = filled(DQN, 'CartPole-v1', target_update_interval=3, tau=1.0)
    target, online = weights(agent.target_model), []
    for step in range(1, 7):
        previous = weights(agent.model)
        agent.update()
        assert all(changed(previous, agent.model))
        online.append(weights(agent.model))
        expected = online[-1] if step % 3 == 0 else (target if step < 3 else online[2])
        for variable, value in zip(agent.target_model.weights, expected):
            np.testing.assert_array_equal(variable.numpy(), value)


# ---------------------------------------------------------------------------- DDPG, TD3
def ddpg_batch() -> list[np.ndarray]:
    """test_off_policy's: s = (1, 0, 0), (2, 0, 0); a = 0.5, -1; r = 1, 0; s' = (0, 0, 0), (1, 0, 0); discounts
    0.9; weights 1."""
    return columns([[1, 0, 0], [2, 0, 0]], [[0.5], [-1]], [1, 0], [[0, 0, 0], [1, 0, 0]], [0.9, 0.9], [1, 1])


@pytest.mark.parametrize('critic_l2, critic_loss', [(0.0, 1.625), (0.01, 1.675)])
def test_ddpg_compiled_step_by_hand(critic_l2, critic_loss):
    """mu(s) = 0.5 everywhere, Q = s0 + 2a: y = 1.9, 1.8; td = 0.1, -1.8; critic loss mean(0.01, 3.24) = 1.625
    (+ 0.01 * (1 + 4) with L2 on the kernel); actor loss -mean(Q(s, 0.5)) = -2.5."""
    critic = linear(4, np.array([[1], [0], [0], [2.0]]))
    agent = DDPG(create_envs('Pendulum-v1'), tanh_actor(0.5), critic, critic_l2=critic_l2, buffer_initial_size=256,
                 quiet=True)
    freeze(agent)
    metrics, errors = compiled_step(agent, *ddpg_batch())
    np.testing.assert_allclose(errors, [0.1, -1.8], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], critic_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], -2.5, rtol=1e-6)


def test_ddpg_compiled_step_bootstraps_from_the_target_actor_and_weighs_errors_by_importance():
    """test_maths' case: y = 1.45, 1.35 from the target actor's a' = -0.25, td = 1.55, -0.35; the critic loss
    mean(1 * 2.4025, 0.5 * 0.1225) + 0.01 * (1 + 4) = 1.281875."""
    critic = linear(4, np.array([[1], [0], [0], [2.0]]), bias=[[1.0]])
    agent = DDPG(create_envs('Pendulum-v1'), tanh_actor(0.5), critic, critic_l2=0.01, buffer_initial_size=256,
                 quiet=True)
    agent.target_actor.set_weights(tanh_actor(-0.25).get_weights())
    freeze(agent)
    batch = columns([[1, 0, 0], [2, 0, 0]], [[0.5], [-1]], [1, 0], [[0, 0, 0], [1, 0, 0]], [0.9, 0.9], [1, 0.5])
    metrics, errors = compiled_step(agent, *batch)
    np.testing.assert_allclose(errors, [1.55, -0.35], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], 1.281875, rtol=1e-5)


def test_td3_compiled_steps_twin_critics_and_the_delayed_actor_by_hand():
    """Q1 = s0 + 2a, Q2 = s0 + a, a' = 0.5 (smoothing clipped to 0): y = 1.45, 1.35; td1 = 0.55, -1.35, td2 = 0.05,
    -0.35; critic loss 1.0625 + 0.0625 = 1.125. The actor waits at the first gradient step and steps at the second
    (-mean(Q1(s, 0.5)) = -2.5): the step counter lives on between calls."""
    critic = linear(4, np.array([[1], [0], [0], [2.0]]), np.array([[1], [0], [0], [1.0]]))
    agent = TD3(create_envs('Pendulum-v1'), tanh_actor(0.5), critic, noise_clip=0.0, buffer_initial_size=256,
                quiet=True)
    freeze(agent)
    metrics, errors = compiled_step(agent, *ddpg_batch())
    np.testing.assert_allclose(errors, [0.55, -1.35], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], 1.125, rtol=1e-5)
    assert metrics['actor_loss'] == 0
    metrics, _ = compiled_step(agent, *ddpg_batch())
    np.testing.assert_allclose(metrics['actor_loss'], -2.5, rtol=1e-6)
    assert int(agent.gradient_updates.numpy()) == 2


def test_td3_compiled_smoothing_draws_clipped_noise_per_sample_and_new_noise_each_call():
    """test_maths' case: a' = clip(0.9 + clip(100 z, -0.5, 0.5), -1, 1), 0.4 or 1.0 for all but the samples with
    |z| < 0.005 (about 0.4% of them, which land between), the smaller critic a', TD error -a'. A second call draws
    other noise: the random stream's state is written back."""
    critic = linear(4, np.array([[0], [0], [0], [1.0]]), np.array([[0], [0], [0], [2.0]]))
    agent = TD3(create_envs('Pendulum-v1'), tanh_actor(0.9), critic, policy_noise_coef=100.0, noise_clip=0.5,
                buffer_initial_size=256, seed=0, quiet=True)
    freeze(agent)
    zeros, ones = np.zeros((200, 3)), np.ones(200)
    batch = columns(zeros, np.zeros((200, 1)), 0 * ones, zeros, ones, ones)
    draws = [-compiled_step(agent, *batch)[1] for _ in range(2)]
    for next_actions in draws:
        lower = np.isclose(next_actions, 0.4, atol=1e-5)
        assert ((next_actions > 0.4 - 1e-5) & (next_actions < 1.0 + 1e-5)).all(), np.unique(next_actions.round(4))
        assert (lower | np.isclose(next_actions, 1.0, atol=1e-5)).mean() > 0.97, np.unique(next_actions.round(4))
        assert 0.3 < lower.mean() < 0.7
    assert not np.array_equal(*draws)


def test_td3_critic_steps_leave_the_actor_and_targets_until_the_delayed_step():
    """Real updates: step 1 moves the critics alone; step 2 the actor too, then both targets by Polyak averaging."""
    agent = filled(TD3, tau=0.05)
    actor, critic = weights(agent.actor), weights(agent.critic)
    target_actor, target_critic = weights(agent.target_actor), weights(agent.target_critic)
    agent.update()
    assert all(changed(critic, agent.critic)) and not any(changed(actor, agent.actor))
    assert not any(changed(target_actor, agent.target_actor) + changed(target_critic, agent.target_critic))
    agent.update()
    assert all(changed(actor, agent.actor))
    for target, old, online in ((agent.target_actor, target_actor, agent.actor),
                                (agent.target_critic, target_critic, agent.critic)):
        for variable, start, source in zip(target.weights, old, online.weights):
            np.testing.assert_allclose(variable.numpy(), 0.95 * start + 0.05 * source.numpy(), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------- SAC
def test_sac_box_compiled_step_by_hand():
    """test_off_policy's case: log std -20 (deterministic tanh(0.5) = t), alpha 1e-9, Q1 = s0 + a, Q2 = s1 + 2a:
    td1 = -0.45249599, -2.5; critic loss 5.88800468; actor loss -0.69317574."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.5, -20.0]])
    critic = linear(4, np.array([[1], [0], [0], [1.0]]), np.array([[0], [1], [0], [2.0]]))
    agent = SAC(create_envs('Pendulum-v1'), actor, critic, alpha=1e-9, buffer_initial_size=256, quiet=True)
    freeze(agent)
    batch = columns([[1, 2, 0], [0, -1, 0]], [[0.5], [-0.5]], [1, 2], [[0.5, 0.5, 0], [2, 1, 0]], [0.99, 0], [1, 1])
    metrics, errors = compiled_step(agent, *batch)
    np.testing.assert_allclose(errors, [1.5 - (1 + 0.99 * (0.5 + math.tanh(0.5))), -2.5], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], 5.88800468, rtol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], -0.69317574, atol=1e-5)


def test_sac_box_compiled_target_subtracts_alpha_times_the_next_log_probability():
    """test_maths' case: mean 0, log std -20, Q1 = Q2 = s0, alpha 0.1: the mean TD error over 512 samples is
    0.1 E[log pi(a'|s')] = 1.858 (adding the entropy term instead gives -1.858)."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.0, -20.0]])
    agent = SAC(create_envs('Pendulum-v1'), actor, linear(4, np.eye(4, 1), np.eye(4, 1)), alpha=0.1,
                buffer_initial_size=256, seed=0, quiet=True)
    agent.target_critic.set_weights(agent.critic.get_weights())
    freeze(agent)
    zeros, ones = np.zeros((512, 3)), np.ones(512)
    _, errors = compiled_step(agent, *columns(zeros, np.zeros((512, 1)), 0 * ones, zeros, ones, ones))
    np.testing.assert_allclose(float(np.mean(errors)), 0.1 * 18.58106147, atol=0.02)


def test_discrete_sac_compiled_step_by_hand():
    """test_off_policy's case: pi = (0.25, 0.75), Q1(s) = (s0, s1), Q2(s) = (s1, s0), alpha 0.5, target entropy 0.3:
    td 0.359416, critic loss 0.269764, actor loss -1.281168, alpha loss -0.181837, entropy 0.562335."""
    actor = linear(4, np.zeros((4, 2)), bias=[[0.0, math.log(3)]])
    critic = linear(4, np.eye(4, 2), np.array([[0, 1], [1, 0], [0, 0], [0, 0]]))
    agent = SAC(create_envs('CartPole-v1'), actor, critic, initial_alpha=0.5, target_entropy=0.3,
                buffer_initial_size=256, quiet=True)
    agent.target_critic.set_weights(agent.critic.get_weights())
    freeze(agent)
    batch = columns([[1, 2, 0, 0]], [1], [[3, 1, 0, 0]], [0.5], [1], actions=np.array([1], np.int64))
    metrics, errors = compiled_step(agent, *batch)
    np.testing.assert_allclose(errors, [0.359416], atol=1e-5)
    for name, value in (('critic_loss', 0.269764), ('actor_loss', -1.281168), ('alpha_loss', -0.181837),
                        ('entropy', 0.562335), ('alpha', 0.5)):
        np.testing.assert_allclose(metrics[name], value, atol=1e-5, err_msg=name)


@pytest.mark.parametrize('alpha', [None, 0.2])
def test_sac_step_moves_actor_critic_and_alpha_and_the_target_by_polyak_only(alpha):
    """Real updates: actor and critics move, alpha only when tuned, the target critic by tau = 0.1."""
    agent = filled(SAC, tau=0.1, alpha=alpha)
    actor, critic, log_alpha = weights(agent.actor), weights(agent.critic), float(agent.log_alpha.numpy())
    target = weights(agent.target_critic)
    agent.update()
    assert all(changed(actor, agent.actor)) and all(changed(critic, agent.critic))
    assert (float(agent.log_alpha.numpy()) != log_alpha) == (alpha is None)
    for variable, start, source in zip(agent.target_critic.weights, target, agent.critic.weights):
        np.testing.assert_allclose(variable.numpy(), 0.9 * start + 0.1 * source.numpy(), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------- QR-DQN
@pytest.mark.parametrize('double, loss, td_errors', [(False, 1.47875, [-2.2, -0.5]), (True, 0.7815625, [0.05, -0.5])])
def test_qrdqn_compiled_step_by_hand(double, loss, td_errors):
    """The worked case of test_qrdqn.test_qrdqn_loss_and_td_errors_by_hand, through the compiled update."""
    agent = quantile_agent(double)
    metrics, errors = compiled_step(agent, *dqn_batch())
    np.testing.assert_allclose(metrics['loss'], loss, rtol=1e-6)
    np.testing.assert_allclose(errors, td_errors, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics['q'], 0.5, rtol=1e-6)  # Q(s, a) = mean(1, 2), mean(2, -3)


# -------------------------------------------------------------------------------------- TQC
def test_tqc_compiled_step_by_hand():
    """The worked case of test_tqc.test_tqc_losses_by_hand, through the compiled update."""
    metrics, errors = compiled_step(test_tqc.tqc_agent(), *columns(*test_tqc.BATCH))
    np.testing.assert_allclose(metrics['critic_loss'], test_tqc.CRITIC_LOSS, rtol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], test_tqc.ACTOR_LOSS, rtol=1e-5)
    np.testing.assert_allclose(errors, test_tqc.TD_ERRORS, rtol=1e-5)


def sgd_critics(agent) -> None:
    """Every learning rate 0 but the critics', which take plain gradient steps of rate 1: one step then moves each
    critic weight by minus its gradient."""
    freeze(agent)
    agent.critic_optimizer = agent.make_optimizer('critic', keras.optimizers.SGD(1.0))


def test_tqc_compiled_target_subtracts_alpha_times_the_next_log_probability():
    """SAC's case with quantiles: mean 0, log std -20, every critic's quantiles 0, alpha 0.1: each kept target quantile
    is -0.1 log pi(a'|s'), so the mean TD error over 512 samples is 0.1 E[log pi(a'|s')] = 1.858 (adding the
    entropy term instead gives -1.858; the by-hand cases' alpha of 1e-9 hides the sign)."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.0, -20.0]])
    agent = TQC(create_envs('Pendulum-v1'), actor, linear(4, np.zeros((4, 2)), np.zeros((4, 2))), alpha=0.1,
                n_quantiles=2, top_quantiles_to_drop_per_net=1, buffer_initial_size=256, seed=0, quiet=True)
    freeze(agent)
    zeros, ones = np.zeros((512, 3)), np.ones(512)
    metrics, errors = compiled_step(agent, *columns(zeros, np.zeros((512, 1)), 0 * ones, zeros, ones, ones))
    np.testing.assert_allclose(float(np.mean(errors)), 0.1 * 18.58106147, atol=0.02)


def test_tqc_compiled_critic_gradients_bootstrap_from_the_target_critics():
    """test_tqc's random critics, the target critics' kernels other than the online ones: after one plain gradient
    step of rate 1, every critic weight has moved by minus its gradient worked out in NumPy (targets from the
    target critics, no gradient through them)."""
    rng = np.random.default_rng(1)
    batch = (rng.normal(size=(4, 3)), rng.uniform(-1, 1, (4, 1)), rng.normal(size=4), rng.normal(size=(4, 3)),
             [0.99, 0.9, 0.5, 0.99], [1.0, 0.5, 2.0, 1.5])
    actor_kernel, actor_bias = rng.normal(size=(3, 1)) * 0.5, 0.2
    critic_kernels = [rng.normal(size=(4, 5)) for _ in range(3)]
    target_kernels = [kernel + rng.normal(size=(4, 5)) for kernel in critic_kernels]
    actor = linear(3, np.hstack([actor_kernel, np.zeros((3, 1))]), bias=[[actor_bias, -20.0]])
    agent = TQC(create_envs('Pendulum-v1'), actor, linear(4, *critic_kernels), alpha=1e-9, n_critics=3,
                n_quantiles=5, top_quantiles_to_drop_per_net=2, buffer_initial_size=256, quiet=True)
    agent.target_critic.set_weights([w for kernel in target_kernels for w in (kernel, np.zeros(5))])
    sgd_critics(agent)
    before = agent.critic.get_weights()
    compiled_step(agent, *columns(*batch))
    gradients = test_tqc.numpy_tqc_critic_gradients(batch, actor_kernel, actor_bias, critic_kernels, target_kernels, 2)
    for start, after, gradient in zip(before, agent.critic.get_weights(), gradients):
        np.testing.assert_allclose(start - after, gradient, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------------- CrossQ
def test_crossq_compiled_step_by_hand():
    """The worked case of test_crossq.test_crossq_update_by_hand, through the compiled update: the joint batch's
    statistics, the running ones it leaves, and the actor's loss against them."""
    agent = test_crossq.crossq_agent()
    metrics, errors = compiled_step(agent, *columns(*test_crossq.BATCH))
    critic_loss, td_errors, actor_loss = test_crossq.expected_update()
    np.testing.assert_allclose(metrics['critic_loss'], critic_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], actor_loss, rtol=1e-5)
    np.testing.assert_allclose(errors, td_errors, rtol=1e-5, atol=1e-6)
    renorm = agent.critic.layers[1]
    assert int(renorm.steps.numpy()) == 1 and np.any(renorm.moving_mean.numpy() != 0)  # written back by the call


def test_crossq_compiled_critic_gradients_hold_the_target_constant():
    """test_crossq's case, its batch renormalisation scaling and shifting, after one plain gradient step of rate 1 on
    the critics: each weight has moved by minus its gradient in NumPy, with no gradient through the target (which
    the same critics give, in the same joint pass)."""
    agent = test_crossq.crossq_agent()
    renorm = agent.critic.layers[1]
    gamma, beta = np.array([1.5, 0.5, 2.0, -1.0]), np.array([0.3, -0.2, 0.1, 0.4])
    renorm.gamma.assign(gamma.astype(np.float32))
    renorm.beta.assign(beta.astype(np.float32))
    sgd_critics(agent)
    before = [ops.convert_to_numpy(weight).copy() for weight in agent.critic.trainable_weights]
    compiled_step(agent, *columns(*test_crossq.BATCH[:-1], test_crossq.WEIGHTS))
    gradients = test_crossq.expected_critic_gradients(gamma, beta, test_crossq.WEIGHTS)
    assert len(gradients) == len(before)
    for start, after, gradient in zip(before, agent.critic.trainable_weights, gradients):
        np.testing.assert_allclose(start - ops.convert_to_numpy(after), gradient.reshape(start.shape), rtol=1e-4,
                                   atol=1e-6)


def test_crossq_actor_steps_on_every_policy_delay_th_gradient_step_counted_from_one():
    """sb3-contrib's phase (its _n_updates counts from 1 and the actor steps when it is a multiple of policy_delay):
    with a delay of 3, the actor moves on gradient steps 3, 6 and 9, whichever call of the update runs them."""
    agent = test_crossq.crossq_agent(policy_delay=3)
    agent.actor_optimizer.learning_rate.assign(0.01)
    batch = columns(*test_crossq.BATCH)
    moved = []
    for _ in range(7):
        before = weights(agent.actor)
        compiled_step(agent, *batch)
        moved.append(any(changed(before, agent.actor)))
    assert moved == [False, False, True, False, False, True, False]
    before = weights(agent.actor)
    agent.compiled_train_steps(*(np.stack([column] * 2) for column in batch))  # steps 8 and 9 in one call
    assert any(changed(before, agent.actor)) and int(agent.gradient_updates.numpy()) == 9


# -------------------------------------------------------------------- train, save and load
VARIANTS = [
    (DQN, 'CartPole-v1', {'double': True, 'dueling': True, 'prioritized': True, 'return_steps': 3}),
    (QRDQN, 'CartPole-v1', {'double': True, 'dueling': True, 'prioritized': True, 'return_steps': 3,
                            'model': 'ann-dueling.cfg', 'n_quantiles': 5}),
    (DDPG, 'Pendulum-v1', {}),
    (TD3, 'Pendulum-v1', {}),
    (SAC, 'Pendulum-v1', {}),
    (SAC, 'CartPole-v1', {}),
    (SAC, 'Pendulum-v1', {'use_sde': True}),
    (TQC, 'Pendulum-v1', {}),
    (CrossQ, 'Pendulum-v1', {}),
]


@pytest.mark.parametrize('agent_class, env_id, settings', VARIANTS,
                         ids=['dqn-rainbow', 'qrdqn-rainbow', 'ddpg', 'td3', 'sac', 'sac-discrete', 'sac-gsde', 'tqc-gsde',
                              'crossq'])
def test_every_variant_trains_saves_and_loads_to_the_same_next_update(tmp_path, agent_class, env_id, settings):
    """A few real updates, a save with the buffer, a load: the loaded agent holds the same weights, optimizer
    states, step counters and random states, so its next update is the original's, number for number."""
    agent = agent_class.from_env(env_id, seed=0, buffer_initial_size=256, buffer_batch_size=32, update_every=50,
                                 gradient_steps=8, quiet=True, **settings)
    initial = {role: weights(model) for role, model in agent.models.items()}
    agent.fit(max_steps=400)  # updates at 300, 350 and 400 steps
    assert int(agent.gradient_updates.numpy()) == 24
    for role in ('model',) if issubclass(agent_class, DQN) else ('actor', 'critic'):
        assert all(changed(initial[role], agent.models[role])), role
    loaded = agent_class.load(agent.save(str(tmp_path / 'saved'), include_buffer=True), quiet=True)
    for role, model in agent.models.items():
        for saved, restored in zip(model.weights, loaded.models[role].weights):
            np.testing.assert_array_equal(saved.numpy(), restored.numpy(), err_msg=role)
    assert int(loaded.gradient_updates.numpy()) == 24
    observations = agent.envs.reset(seed=1)[0]
    np.testing.assert_array_equal(loaded.act(observations, True), agent.act(observations, True))
    expected, metrics = agent.update(), loaded.update()
    assert all(np.isfinite(float(value)) for value in expected.values()) and expected
    for name, value in expected.items():
        np.testing.assert_allclose(float(metrics[name]), float(value), rtol=1e-5, err_msg=name)
    for role, model in agent.models.items():
        for original, restored in zip(model.weights, loaded.models[role].weights):
            np.testing.assert_allclose(restored.numpy(), original.numpy(), rtol=1e-5, atol=1e-7, err_msg=role)


def test_graph_variables_hold_every_variable_a_compiled_update_uses():
    """Models, optimizers, the random stream and the gradient step counter: on JAX, any other variable would be a
    constant of the compilation, its assignments lost."""
    agent = TD3.from_env('Pendulum-v1', seed=0, quiet=True)
    tracked = {id(variable) for variable in agent.graph_variables()}
    expected = [agent.gradient_updates, agent.graph_random.state, *agent.target_actor.variables,
                *agent.target_critic.variables, *agent.critic_optimizer.variables, *agent.actor.variables]
    assert all(id(variable) in tracked for variable in expected)


# ------------------------------------------------------------------------------ learning
# Random play scores ~22 on CartPole and -1200 to -1500 on Pendulum; on seed 0 both backends pass -400 on Pendulum
# between 4,400 and 5,600 steps (10-16 s here) and DQN's evaluation passes 150 at its first or second one.
EAGER_TORCH = 'on PyTorch, PPO and SAC alone learn in the tests (eager updates: minutes a run here)'
NOT_ON_TENSORFLOW = pytest.mark.skipif(keras.backend.backend() == 'tensorflow',
                                 reason="on TensorFlow the agents' own learning tests run (test_off_policy_learning)")


@NOT_ON_TENSORFLOW
@pytest.mark.parametrize('agent_class, target, max_steps, eval_frequency', [(DQN, 150, 10_000, 2500),
                                                                            (QRDQN, 300, 40_000, 5000)])
def test_value_based_agents_learn_cartpole(agent_class, target, max_steps, eval_frequency):
    if keras.backend.backend() == 'torch':
        pytest.skip(EAGER_TORCH)
    agent = agent_class.from_env('CartPole-v1', seed=0, quiet=True)
    run = agent.fit(target_reward=target, max_steps=max_steps, eval_frequency=eval_frequency, eval_episodes=5,
                    stop_on='eval')
    assert run.eval_reward >= target, run.eval_reward


@NOT_ON_TENSORFLOW
@pytest.mark.parametrize('agent_class', [SAC, TD3, DDPG, TQC, CrossQ])
def test_continuous_agents_learn_pendulum_to_minus_400(agent_class):
    if keras.backend.backend() == 'torch' and agent_class is not SAC:
        pytest.skip(EAGER_TORCH)
    agent = agent_class.from_env('Pendulum-v1', seed=0, reward_buffer_size=10, quiet=True)
    run = agent.fit(target_reward=-400, max_steps=8_000)
    assert len(run.reward_buffer) == 10 and run.mean_reward >= -400, run.mean_reward

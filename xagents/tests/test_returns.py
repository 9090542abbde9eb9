"""GAE against values worked out by hand."""
import numpy as np

from xagents.maths.returns import gae


def test_gae_two_envs_by_hand():
    # env 0: gamma 0.9, lam 0.8, episode ends after t=1.
    #   t=2: delta = 1 + 0.9*0.2 - 0.3 = 0.88                      A = 0.88
    #   t=1: delta = 1 + 0 - 0.4 = 0.6 (done: no bootstrap)       A = 0.6
    #   t=0: delta = 1 + 0.9*0.4 - 0.5 = 0.86                      A = 0.86 + 0.9*0.8*0.6 = 1.292
    # env 1: values 0, reward 1 at t=2 only, last value 1; lam 0.8 too:
    #   t=2: delta = 1 + 0.9*1 = 1.9                               A = 1.9
    #   t=1: delta = 0                                             A = 0.72*1.9 = 1.368
    #   t=0: delta = 0                                             A = 0.72*1.368 = 0.98496
    rewards = np.array([[1, 0], [1, 0], [1, 1]], np.float32)
    values = np.array([[0.5, 0], [0.4, 0], [0.3, 0]], np.float32)
    dones = np.array([[0, 0], [1, 0], [0, 0]], np.float32)
    advantages, returns = gae(rewards, values, dones, np.array([0.2, 1.0]), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(advantages, [[1.292, 0.98496], [0.6, 1.368], [0.88, 1.9]], rtol=1e-5)
    np.testing.assert_allclose(returns, advantages + values, rtol=1e-6)


def test_lambda_one_gives_n_step_returns():
    # R_t = r_t + 0.5 R_{t+1}, R_3 = V(s_3) = 8: R_2 = 2 + 4 = 6, R_1 = 0 + 3 = 3, R_0 = 1 + 1.5 = 2.5
    rewards = np.array([[1], [0], [2]], np.float32)
    values = np.array([[3], [1], [5]], np.float32)
    _, returns = gae(rewards, values, np.zeros((3, 1), np.float32), np.array([8.0]), gamma=0.5, lam=1.0)
    np.testing.assert_allclose(returns[:, 0], [2.5, 3, 6])

"""Return and advantage estimators shared by agents, as pure NumPy functions."""
from __future__ import annotations

import numpy as np


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438), all envs at once.

    Args:
        rewards: ``(T, N)`` rewards; a truncated step's reward already includes
            ``gamma * V(final observation)``, so truncation needs no special case here.
        values: ``(T, N)`` value estimates of the observations acted on.
        dones: ``(T, N)`` 1 where the episode ended after that step (no bootstrap across it).
        last_values: ``(N,)`` values of the observations following the last step.
        gamma: Discount factor.
        lam: GAE lambda; 1 gives n-step returns minus values (A2C), 0 one-step TD errors.

    Returns:
        ``(advantages, returns)``, both ``(T, N)`` float32, with ``returns = advantages + values``.
    """
    advantages = np.zeros_like(values, dtype=np.float32)
    next_values, next_advantage = last_values, 0.0
    for t in reversed(range(len(rewards))):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * not_done - values[t]
        next_advantage = delta + gamma * lam * not_done * next_advantage
        advantages[t] = next_advantage
        next_values = values[t]
    return advantages, advantages + values

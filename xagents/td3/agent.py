"""Twin delayed DDPG (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477)."""
from __future__ import annotations

import gymnasium as gym
import keras

from xagents.ddpg.agent import DDPG


class TD3(DDPG):
    """TD3: DDPG with its three fixes switched on (the update is :meth:`DDPG.train_step`).

    1. Clipped double Q-learning: twin critics, the target takes the smaller of their values.
    2. Delayed policy updates: the actor and the targets move every ``policy_delay`` gradient
       steps, the critics every step.
    3. Target policy smoothing: ``a' = clip(mu_targ(s') + clip(N(0, policy_noise_coef^2),
       -noise_clip, noise_clip), -1, 1)``.
    """

    n_critics = 2
    dense_variant = '-400-300'  # SB3's networks by default; the presets of small tasks name the 64-64 ones
    dense_variant_since = (2, 2)

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        actor_model: str | keras.Model | None = None,
        critic_model: str | keras.Model | None = None,
        *,
        policy_delay: int = 2,
        policy_noise_coef: float = 0.2,
        noise_clip: float = 0.5,
        **kwargs,
    ) -> None:
        """
        Args:
            actor_model: Policy: a .cfg file, or from Python a Keras model (default: packaged cfg, 400-300 as
                SB3's; ``ann-actor.cfg`` is 64-64).
            critic_model: Twin Q-functions, one model with two heads (default: packaged cfg, each 400-300 as
                SB3's; ``ann-critic.cfg`` is 64-64).
            policy_delay: Gradient steps per actor and target update.
            policy_noise_coef: Standard deviation of the target policy smoothing noise.
            noise_clip: The smoothing noise is clipped to [-noise_clip, noise_clip].
        """
        super().__init__(envs, actor_model, critic_model, **kwargs)
        self.policy_delay = self.target_update_interval = policy_delay
        self.policy_noise_coef, self.noise_clip = policy_noise_coef, noise_clip

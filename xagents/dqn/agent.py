"""Deep Q-networks (Mnih et al. 2015, https://doi.org/10.1038/nature14236) with the usual extensions."""
from __future__ import annotations

import os

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.agent.off_policy import OffPolicy
from xagents.training.distributed import apex_exponent
from xagents.envs.masks import masked_logits, masked_logits_np, random_valid
from xagents.networks.models import Output, is_image_space
from xagents.maths.losses import huber
from xagents.maths.multi_distributions import argmax


# Generic defaults follow the observation space, as Stable-Baselines3 picks a policy by it: the Nature paper's
# Atari-sized settings for images; for any other observations RL Zoo's for Acrobot and LunarLander (its DQN
# presets there), which reach the classic and Box2D targets where the Atari-sized ones explore for 250,000 steps.
IMAGE_DEFAULTS = {'lr': 1e-4, 'buffer_max_size': 1_000_000, 'buffer_initial_size': 50_000, 'buffer_batch_size': 32,
                  'update_every': 4, 'gradient_steps': 1, 'target_update_interval': 2500, 'epsilon_end': 0.05,
                  'epsilon_decay_steps': 250_000}
VECTOR_DEFAULTS = {'lr': 6.3e-4, 'buffer_max_size': 50_000, 'buffer_initial_size': 1_000, 'buffer_batch_size': 128,
                   'update_every': 64, 'gradient_steps': 64, 'target_update_interval': 250, 'epsilon_end': 0.1,
                   'epsilon_decay_steps': 12_000}


def dueling_twin(model):
    """A packaged Q-network's name (a preset's ``ann-model-256.cfg``) as its dueling twin's (``ann-dueling-256.cfg``),
    where one is packaged: ``dueling`` then keeps the preset's widths. Anything else as given."""
    if not (isinstance(model, str) and os.path.basename(model) == model and not os.path.exists(model)):
        return model
    twin = model.replace('-model', '-dueling', 1)
    return twin if os.path.isfile(os.path.join(os.path.dirname(__file__), 'models', twin)) else model


class DQN(OffPolicy):
    """DQN with a target network, epsilon-greedy exploration and a Huber loss.

    loss = E[w * huber(Q(s, a) - y)],  y = R + discount * Q_targ(s', argmax_a' Q_pick(s', a'))
    where ``R`` and ``discount`` are the n-step return and ``gamma ** k`` (0 after a termination)
    from the buffer, ``Q_pick`` is the target network, or the online one with ``double`` (van
    Hasselt et al. 2016, https://arxiv.org/abs/1509.06461), and ``w`` the prioritised-replay
    importance weights (ones without ``prioritized``).
    ``dueling`` builds Q = V + A - mean(A) from the two heads of a dueling cfg (Wang et al. 2016,
    https://arxiv.org/abs/1511.06581). The target network is copied every
    ``target_update_interval`` gradient steps (``tau`` < 1 averages it instead).
    With action masks the greedy action, the epsilon-random one (uniform over the allowed actions) and the
    target's ``argmax_a'`` (of either network) run over the allowed actions only, those of ``s'`` for the target.
    """

    masks_actions = True

    supported_action_spaces = (gym.spaces.Discrete,)
    model_roles = ('model', 'target_model')
    metric_names = ('loss', 'q')

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | keras.Model | None = None,
        *,
        lr: float | None = None,
        buffer_max_size: int | None = None,
        buffer_initial_size: int | None = None,
        buffer_batch_size: int | None = None,
        update_every: int | None = None,
        gradient_steps: int | None = None,
        tau: float = 1.0,
        target_update_interval: int | None = None,
        epsilon_start: float = 1.0,
        epsilon_end: float | None = None,
        epsilon_decay_steps: int | None = None,
        double: bool = False,
        dueling: bool = False,
        grad_norm: float = 10.0,
        **kwargs,
    ) -> None:
        """
        Args:
            model: Q-network: a .cfg file, or from Python a Keras model (default: packaged cfg; a dueling cfg has
                a value and an advantage head).
            lr: Learning rate (default: 6.3e-4; 1e-4 for image observations).
            buffer_max_size: Replay buffer capacity in transitions (over all envs; default: 50,000; 1,000,000 for
                image observations).
            buffer_initial_size: Transitions gathered with uniform random actions before learning starts (default:
                1,000; 50,000 for image observations).
            buffer_batch_size: Transitions per gradient step (default: 128; 32 for image observations).
            update_every: Env steps (summed over envs, a multiple of n_envs) between updates (default: 64; 4 for
                image observations).
            gradient_steps: Gradient steps per update, all run in one compiled call (default: 64; 1 for image
                observations).
            tau: Polyak coefficient of the target network (1 copies it).
            target_update_interval: Gradient steps between target network updates (default: 250; 2,500 for image
                observations).
            epsilon_start: Exploration rate at the first step.
            epsilon_end: Exploration rate after epsilon_decay_steps (default: 0.1; 0.05 for image observations).
            epsilon_decay_steps: Env steps over which epsilon falls linearly (default: 12,000; 250,000 for image
                observations).
            double: Double DQN: the online network picks the next action, the target rates it.
            dueling: Dueling heads: Q = V + A - mean(A) (the default cfg, or a packaged one such as a preset's
                ann-model-256.cfg, becomes its dueling twin).
            grad_norm: Clip gradients to this global norm.
        """
        given = {'lr': lr, 'buffer_max_size': buffer_max_size, 'buffer_initial_size': buffer_initial_size,
                 'buffer_batch_size': buffer_batch_size, 'update_every': update_every, 'gradient_steps': gradient_steps,
                 'target_update_interval': target_update_interval, 'epsilon_end': epsilon_end,
                 'epsilon_decay_steps': epsilon_decay_steps}
        generic = self.space_defaults(envs.single_observation_space)
        settings = {name: generic[name] if value is None else value for name, value in given.items()}
        own = {name: settings.pop(name) for name in ('target_update_interval', 'epsilon_end', 'epsilon_decay_steps')}
        super().__init__(envs, tau=tau, **settings, **kwargs)
        self.target_update_interval = own['target_update_interval']
        self.epsilon_start, self.epsilon_end = epsilon_start, own['epsilon_end']
        self.epsilon_decay_steps = own['epsilon_decay_steps']
        self.epsilon_scale = 1.0  # a distributed worker's explores less (see become_worker)
        self.double, self.dueling, self.grad_norm = double, dueling, grad_norm
        self.model = self.build('model', dueling_twin(model) if dueling else model, self.q_outputs(),
                                packaged='dueling' if dueling else None)
        self.target_model = self.build_target('target_model', self.model)
        self.optimizer = self.make_optimizer('model', global_clipnorm=grad_norm)
        self.forward = self.acting(self.model)

    @staticmethod
    def space_defaults(observation_space: gym.Space) -> dict:
        """The generic defaults for ``observation_space``: Atari-sized for images, RL Zoo's classic ones else."""
        return IMAGE_DEFAULTS if is_image_space(observation_space) else VECTOR_DEFAULTS

    def q_outputs(self) -> list[Output]:
        """The heads of the Q-network: the Q-values, or a dueling cfg's value and advantages."""
        if self.dueling:
            return [Output('value', 1), Output('advantage', self.n_actions)]
        return [Output('q', self.n_actions)]

    @property
    def epsilon(self) -> float:
        """The exploration rate at the current step."""
        progress = min(1.0, self.steps / self.epsilon_decay_steps)
        return (self.epsilon_start + progress * (self.epsilon_end - self.epsilon_start)) * self.epsilon_scale

    def become_worker(self, index: int, count: int, first_step: int = 0) -> None:
        super().become_worker(index, count, first_step)
        self.epsilon_scale = 0.4 ** apex_exponent(index, count)  # Ape-X: each actor its own rate

    def q_values_np(self, observations: np.ndarray) -> np.ndarray:
        outputs = self.forward(observations)
        if self.dueling:
            value, advantage = outputs
            return value + advantage - advantage.mean(-1, keepdims=True)
        return outputs[0]

    def policy(self, observations: np.ndarray, deterministic: bool = True,
               action_masks: np.ndarray | None = None) -> np.ndarray:
        return masked_logits_np(self.q_values_np(observations), action_masks).argmax(-1)

    def greedy_graph(self, observations, action_masks=None):
        return argmax(masked_logits(self.q_values(self.model, observations), action_masks))

    def explore(self, observations: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        greedy = self.policy(observations, action_masks=action_masks)
        explore = self.rng.random(len(greedy)) < self.epsilon
        if action_masks is not None:
            return np.where(explore, random_valid(self.rng, action_masks), greedy)
        return np.where(explore, self.rng.integers(0, self.n_actions, len(greedy)), greedy)

    def q_values(self, model: keras.Model, observations):
        """``(batch, n_actions)`` Q-values of ``model`` (combining dueling heads)."""
        if self.dueling:
            value, advantage = model(observations)
            return value + advantage - ops.mean(advantage, -1, keepdims=True)
        return model(observations)

    def action_values(self, observations, actions):
        return taken(self.q_values(self.model, observations), actions)[None]

    def next_values(self, next_observations, next_action_masks=None):
        """``Q_targ(s', argmax_a' Q_pick(s', a'))``, the argmax over the actions ``next_action_masks`` allows."""
        next_q = self.q_values(self.target_model, next_observations)
        if self.double:
            picked = self.q_values(self.model, next_observations)
            next_actions = ops.argmax(masked_logits(picked, next_action_masks), -1)
        else:
            next_actions = ops.argmax(masked_logits(next_q, next_action_masks), -1)
        return taken(next_q, next_actions)

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights,
                   action_masks=None, next_action_masks=None):
        targets = ops.stop_gradient(rewards + discounts * self.next_values(next_observations, next_action_masks))

        def td_loss():
            q = self.action_values(observations, actions)[0]
            td_errors = q - targets
            return ops.mean(weights * huber(td_errors)), (q, td_errors)

        variables = self.model.trainable_variables
        (loss, (q, td_errors)), gradients = backend.value_and_grad(td_loss, variables)
        self.optimizer.apply(gradients, variables)
        return {'loss': loss, 'q': ops.mean(q)}, td_errors


def taken(values, actions):
    """``(batch,)`` the entries of ``(batch, n)`` ``values`` at ``(batch,)`` integer ``actions``."""
    return ops.take_along_axis(values, ops.cast(actions, 'int32')[:, None], axis=-1)[:, 0]


"""Actor-critic with experience replay (Wang et al. 2016, arXiv 1611.01224), discrete actions."""
from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.agent.base import BaseAgent
from xagents.envs.creation import frame_stacked
from xagents.utils.memory import check_fits
from xagents.networks.models import Output, build_model
from xagents.networks.own import copy_model
from xagents.maths.optimization import retrace_targets, trust_region_projection
from xagents.maths.rmsprop import RMSpropTF1
from xagents.replay.segments import SegmentBuffer, TrajectorySegment
from xagents.utils.streams import REPLAY, random_stream

EPSILON = 1e-6  # keeps probability ratios and logarithms finite


class ACER(BaseAgent):
    """ACER: Retrace Q targets, truncated importance sampling, an average-policy trust region.

    Wang et al. 2016, https://arxiv.org/abs/1611.01224. Discrete actions only: the paper's
    continuous variant (stochastic dueling networks) is out of scope.

    One model outputs policy logits and ``Q(x, .)``; ``V(x) = sum_a pi(a|x) Q(x, a)``. Each
    :meth:`train_once` collects ``n_steps`` from every env (one segment), makes the on-policy
    update on it, stores it, and, once ``buffer_initial_size`` segments are stored, makes
    ``Poisson(replay_ratio)`` more updates on segments drawn from the buffer. Per update
    (algorithm 2 of the paper, as OpenAI Baselines' ``acer`` computes it):

    - Retrace targets ``Q^ret`` with ``rho_bar = min(1, pi / mu)`` (``mu``: behaviour policy);
    - policy gain ``min(c, rho) log pi(a|x) (Q^ret - V)`` plus the bias correction
      ``sum_a [1 - c / rho(a)]_+ pi(a|x) log pi(a|x) (Q(x, a) - V(x))`` and an entropy bonus;
    - its gradient ``g`` with respect to the policy's probabilities is projected onto
      ``k . z <= delta``, ``k`` the gradient of ``KL(average policy || policy)`` (eq. 12), and
      back-propagated with the Q loss ``value_loss_coef * 0.5 (Q^ret - Q(x, a))^2``;
    - RMSProp as Baselines' TensorFlow 1 computes it (:class:`RMSpropTF1`) with gradients clipped
      to ``grad_norm`` (learning rate optionally decayed linearly by the shared loop,
      ``lr_decay_steps``), then the average network moves towards the model:
      ``average = ema_alpha * average + (1 - ema_alpha) * model``.

    Resuming from a checkpoint restarts the average network from the loaded weights.
    """

    supported_action_spaces = (gym.spaces.Discrete,)
    model_roles = ('model',)

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        model: str | keras.Model | None = None,
        *,
        n_steps: int = 20,
        lr: float = 7e-4,
        rmsprop_alpha: float = 0.99,
        rmsprop_epsilon: float = 1e-5,
        entropy_coef: float = 0.01,
        value_loss_coef: float = 0.5,
        grad_norm: float = 10.0,
        importance_c: float = 10.0,
        trust_region: bool = True,
        delta: float = 1.0,
        ema_alpha: float = 0.99,
        replay_ratio: float = 4.0,
        buffer_max_size: int = 2500,
        buffer_initial_size: int = 500,
        **kwargs,
    ) -> None:
        """Build the model, its average copy, the optimizer and the segment buffer.

        Args:
            model: Model with policy logits and Q outputs: a .cfg file, or from Python a Keras model
                (default: packaged cfg).
            n_steps: Steps per env in each segment (on-policy batch and replayed unit).
            lr: RMSProp learning rate.
            rmsprop_alpha: RMSProp decay of the squared-gradient average.
            rmsprop_epsilon: RMSProp epsilon, added inside the square root.
            entropy_coef: Weight of the entropy bonus.
            value_loss_coef: Weight of the Q loss.
            grad_norm: Clip gradients to this global norm.
            importance_c: Truncate importance weights at c (the bias correction adds the rest).
            trust_region: Project policy gradients into the trust region around the average policy.
            delta: Trust-region bound on the linearised KL(average policy || policy) per sample.
            ema_alpha: Decay of the exponential moving average of the model's weights.
            replay_ratio: Mean number (Poisson) of replayed updates after each on-policy update.
            buffer_max_size: Replay buffer capacity in segments (n_steps x n_envs steps each; Baselines:
                50,000 frames per env at 20 steps a segment).
            buffer_initial_size: Segments stored before replay starts (Baselines: 10,000 frames per env).
        """
        super().__init__(envs, lr=lr, **kwargs)
        if not 1 <= buffer_initial_size <= buffer_max_size:
            raise ValueError(f'expected 1 <= buffer_initial_size <= buffer_max_size = {buffer_max_size}, '
                             f'got {buffer_initial_size}')
        self.n_steps = n_steps
        self.entropy_coef, self.value_loss_coef, self.grad_norm = entropy_coef, value_loss_coef, grad_norm
        self.importance_c, self.trust_region, self.delta = importance_c, trust_region, delta
        self.ema_alpha, self.replay_ratio = ema_alpha, replay_ratio
        self.buffer_max_size, self.buffer_initial_size = buffer_max_size, buffer_initial_size
        self.n_actions = int(envs.single_action_space.n)
        outputs = [Output('policy', self.n_actions), Output('q', self.n_actions)]
        self.model = self.build('model', model, outputs)
        if model is not None and not isinstance(model, str):  # a network of the user's
            self.average = copy_model(self.model)
        else:
            space = envs.single_observation_space
            self.average = build_model(self.model_file('model', space, model), space, outputs, name='average',
                                       precision=self.precision)
        self.average.set_weights(self.model.get_weights())
        self.optimizer = self.make_optimizer('model', RMSpropTF1(lr, rho=rmsprop_alpha, epsilon=rmsprop_epsilon))
        def segment_buffer(capacity: int) -> SegmentBuffer:
            return SegmentBuffer(capacity, n_steps, self.n_envs, self.observation_space, envs.single_action_space,
                                 seed=random_stream(self.seed, REPLAY), keys=self.dict_observations,
                                 frame_stack_axis=-1 if frame_stacked(envs) else None)

        check_fits(f'a replay buffer of {buffer_max_size:,} segments', segment_buffer(1).nbytes * buffer_max_size,
                   'lower --buffer-max-size')
        self.buffer = segment_buffer(buffer_max_size)
        self.policy_and_q = self.acting(self.model)

    # ----------------------------------------------------------------------------- acting
    def worker_settings(self) -> dict:
        return {**super().worker_settings(), 'buffer_max_size': 1, 'buffer_initial_size': 1}  # workers only act

    def load_weights(self, weights: Sequence[str]) -> None:
        super().load_weights(weights)
        self.average.set_weights(self.model.get_weights())

    def forward(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Action probabilities ``(B, n_actions)`` and values ``V = sum_a pi Q`` ``(B,)``."""
        logits, q = self.policy_and_q(observations)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return probs, (probs * q).sum(-1)

    def act(self, observations: np.ndarray, deterministic: bool = False) -> np.ndarray:
        probs = self.forward(self.normalized(observations))[0]
        return self.env_actions(probs.argmax(-1) if deterministic else self.sample_actions(probs))

    def greedy_graph(self, observations):
        """The most probable action (the argmax of the policy logits), what ``act(deterministic=True)`` takes."""
        return ops.argmax(self.model(observations)[0], -1)

    def sample_actions(self, probs: np.ndarray) -> np.ndarray:
        """One action per row of ``probs``, by inverting the cumulative distribution."""
        cumulative = probs.cumsum(-1)
        draws = self.rng.random((len(probs), 1)) * cumulative[:, -1:]
        return np.minimum((draws > cumulative).sum(-1), self.n_actions - 1)

    def collect(self) -> TrajectorySegment:
        """Act ``n_steps`` in every env; truncated episodes bootstrap ``gamma * V(final)``."""
        observations = np.zeros((self.n_steps + 1,) + self.observations.shape, self.observations.dtype)
        actions = np.zeros((self.n_steps, self.n_envs), np.int64)
        rewards = np.zeros((self.n_steps, self.n_envs), np.float32)
        dones = np.zeros((self.n_steps, self.n_envs), np.float32)
        policies = np.zeros((self.n_steps, self.n_envs, self.n_actions), np.float32)
        for t in range(self.n_steps):
            observations[t] = self.observe(self.observations)
            policies[t] = self.forward(observations[t])[0]
            actions[t] = self.sample_actions(policies[t])
            self.observations, rewards[t], terminated, truncated, finals = self.step_envs(actions[t])
            dones[t] = terminated | truncated
            rewards[t] = self.bootstrapped(rewards[t], terminated, truncated, finals)
        observations[-1] = self.normalized(self.observations)
        return TrajectorySegment(observations, actions, rewards, dones, policies)

    # ---------------------------------------------------------------------------- training
    def train_once(self) -> dict[str, float]:
        segment = self.gathered()
        self.buffer.add(segment)
        metrics = self.train_step(*segment)
        if len(self.buffer) >= self.buffer_initial_size:
            for _ in range(self.rng.poisson(self.replay_ratio)):
                metrics = self.train_step(*self.buffer.sample())
        self.on_weights_changed()
        return metrics

    def graph_variables(self) -> list:
        """The shared variables and the average network's, which each update reads and moves."""
        return [*super().graph_variables(), *self.average.variables]

    def segment_terms(self, observations, actions, rewards, dones, behaviour_policies) -> dict:
        """The model's policy ``probs`` ``(T, N, n_actions)`` and Q loss on a segment, with the constants ACER's
        policy gain weighs ``log pi`` by (importance weights, Retrace targets, Q advantages; gradients stopped)."""
        steps, envs = self.n_steps, self.n_envs
        logits, q = self.model(ops.reshape(observations, (-1, *observations.shape[2:])))
        probs_all = ops.reshape(ops.softmax(logits, -1), (steps + 1, envs, self.n_actions))
        q_all = ops.reshape(q, (steps + 1, envs, self.n_actions))
        values_all = ops.stop_gradient(ops.sum(probs_all * q_all, -1))
        probs, q, values = probs_all[:-1], q_all[:-1], values_all[:-1]
        actions = ops.cast(actions, 'int32')[..., None]
        rhos = ops.stop_gradient(probs / (behaviour_policies + EPSILON))
        rho_taken = ops.take_along_axis(rhos, actions, -1)[..., 0]
        q_taken = ops.take_along_axis(q, actions, -1)[..., 0]
        q_retrace = ops.stop_gradient(retrace_targets(
            rewards, dones, ops.stop_gradient(q_taken), values, ops.minimum(1.0, rho_taken), values_all[-1],
            self.gamma))
        return {'probs': probs, 'actions': actions, 'q_loss': 0.5 * ops.mean((q_retrace - q_taken) ** 2),
                # Truncated importance sampling of the taken action...
                'gain_weights': ops.stop_gradient(ops.minimum(self.importance_c, rho_taken) * (q_retrace - values)),
                # ...and the bias correction: what truncation cut, in expectation over pi with Q's advantages.
                'correction_weights': ops.stop_gradient(
                    ops.relu(1 - self.importance_c / (rhos + EPSILON)) * probs * (q - values[..., None]))}

    def policy_objective(self, probs, terms: dict) -> tuple:
        """``(objective, metrics)`` of ``probs`` ``(T, N, n_actions)`` under the constant weights of
        :meth:`segment_terms`: the sum over samples of the policy gain (truncated importance sampling + bias
        correction + entropy bonus), whose gradient with respect to ``probs`` the trust region adjusts."""
        log_probs = ops.log(probs + EPSILON)
        gain = ops.take_along_axis(log_probs, terms['actions'], -1)[..., 0] * terms['gain_weights']
        correction = ops.sum(log_probs * terms['correction_weights'], -1)
        entropy = -ops.sum(probs * log_probs, -1)
        objective = ops.sum(gain + correction + self.entropy_coef * entropy)
        return objective, {'policy_loss': -ops.mean(gain + correction), 'q_loss': terms['q_loss'],
                           'entropy': ops.mean(entropy)}

    def losses(self, observations, actions, rewards, dones, behaviour_policies) -> tuple:
        """ACER's terms for one segment, differentiable through the model: ``(objective, q_loss, probs, metrics)``
        (see :meth:`policy_objective`)."""
        terms = self.segment_terms(observations, actions, rewards, dones, behaviour_policies)
        objective, metrics = self.policy_objective(terms['probs'], terms)
        return objective, terms['q_loss'], terms['probs'], metrics

    @backend.compiled_method
    def train_step(self, observations, actions, rewards, dones, behaviour_policies) -> dict:
        """One update from a segment: ``observations`` ``(T + 1, N, ...)``, ``actions``,
        ``rewards``, ``dones`` ``(T, N)`` and ``behaviour_policies`` ``(T, N, n_actions)``."""
        batch = self.n_steps * self.n_envs
        average_logits = self.average(ops.reshape(observations[:-1], (batch, *observations.shape[2:])))[0]
        average_probs = ops.reshape(ops.softmax(average_logits, -1), (self.n_steps, self.n_envs, self.n_actions))

        def loss():
            terms = self.segment_terms(observations, actions, rewards, dones, behaviour_policies)
            probs = terms['probs']
            fixed_probs = ops.stop_gradient(probs)
            _, metrics = self.policy_objective(fixed_probs, terms)
            # g: the objective's gradient with respect to the policy's probabilities.
            _, g = backend.vjp(lambda probs: self.policy_objective(probs, terms)[0], fixed_probs,
                               ops.convert_to_tensor(1.0))
            k = -average_probs / (fixed_probs + EPSILON)  # d KL(average || pi) / d pi
            z = trust_region_projection(g, k, self.delta) if self.trust_region else g
            metrics['linear_kl'] = ops.max(ops.sum(k * z, -1))
            # The model's gradient: -z / batch pulled back through the probabilities, plus the Q loss's.
            return (-ops.sum(ops.stop_gradient(z) * probs) / batch + self.value_loss_coef * terms['q_loss'],
                    metrics)

        variables = self.model.trainable_variables
        (_, metrics), gradients = backend.value_and_grad(loss, variables)
        norm = ops.sqrt(sum(ops.sum(ops.square(gradient)) for gradient in gradients))
        # As tf.clip_by_global_norm: every gradient scaled by grad_norm / max(norm, grad_norm).
        scale = self.grad_norm / ops.maximum(norm, self.grad_norm)
        self.optimizer.apply([gradient * scale for gradient in gradients], variables)
        for average, weight in zip(self.average.weights, self.model.weights):
            average.assign(self.ema_alpha * average + (1 - self.ema_alpha) * weight)
        return {**metrics, 'gradient_norm': norm}

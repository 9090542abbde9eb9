"""OffPolicy: agents that learn from a replay buffer (DQN, QR-DQN, DDPG, TD3, SAC, TQC): replay, updates of many gradient
steps in one compiled call (:mod:`xagents.backend`), and Polyak-averaged targets."""
from __future__ import annotations

import functools
from collections.abc import Sequence

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from xagents import backend
from xagents.agent.base import BaseAgent
from xagents.replay.buffers import ReplayBuffer
from xagents.envs.creation import frame_stacked
from xagents.envs.goal_envs import check_goal_space
from xagents.replay.her import STRATEGIES, HerReplayBuffer, goal_reward
from xagents.envs.masks import mask_kwargs as masked
from xagents.envs.masks import random_valid
from xagents.utils.memory import check_fits
from xagents.networks.models import NumpyForward, Output, build_model, is_image_space
from xagents.networks.own import copy_model
from xagents.envs.observations import DictObservations
from xagents.replay.prioritized import PrioritizedReplayBuffer
from xagents.utils.streams import REPLAY, random_stream


class OffPolicy(BaseAgent):
    """Agents that learn from a replay buffer (DQN, QR-DQN, DDPG, TD3, SAC, TQC).

    Each :meth:`train_once` acts for ``update_every`` env steps and stores every transition with
    its true final observation, so a time-limit truncation bootstraps and a termination does not
    (Pardo et al. 2018, https://arxiv.org/abs/1712.00378). Learning starts once
    ``buffer_initial_size`` transitions have been added to the buffer (SB3's ``learning_starts``;
    a full buffer holds fewer, as each episode end keeps a slot) and ``update_after`` env steps
    have passed (with ``her``, once an episode has ended too); actions are uniformly random for the
    first ``start_steps`` env steps. An update
    samples the minibatches of all its ``gradient_steps`` at once in NumPy (each its own sample of
    the whole buffer) and runs them in one compiled call: a loop over the agent's ``train_step`` (one
    gradient step: the algorithm's maths, in ``keras.ops``), the target networks moving towards their online
    networks by Polyak averaging every ``target_update_interval`` gradient steps (the count of gradient steps
    and the random stream of target noise and sampled actions carry over from call to call). A compiled call
    costs ~0.3 ms on TensorFlow (~0.1 ms on JAX) beyond what it computes, so Spinning Up's ``update_every =
    gradient_steps = 50`` keeps one gradient step per env step while paying that cost once per 50 steps.

    Box actions live in ``[-1, 1]`` inside the agent and the buffer and are scaled to the env's
    bounds when sent. Small MLP policies act in NumPy on a copy of their weights.

    With ``her`` (goal envs) the buffer is a :class:`~xagents.replay.her.HerReplayBuffer`: part of every sampled
    batch gets goals achieved later in its episode and their rewards, relabelled on raw observations that
    :meth:`update` then normalises as any others.

    With action masks (discrete agents), every action taken, random ones included, is an allowed one, and the
    buffer keeps each observation's mask so that targets run over the actions allowed in the next state:
    ``train_step`` then gets ``action_masks`` and ``next_action_masks`` ``(batch, n)``.

    Subclasses build their models (targets through :meth:`build_target`), set ``metric_names``
    (the scalars their ``train_step`` reports), ``target_update_interval`` if not 1, and implement
    ``explore`` (training actions), ``act``, ``train_step`` and the two terms of its TD error,
    ``action_values`` and ``next_values`` (with prioritised replay, workers evaluate them to send
    initial priorities, as Ape-X's actors do).
    """

    metric_names: tuple[str, ...] = ()
    observation_clip = 5.0  # Baselines' DDPG

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        *,
        buffer_max_size: int = 1_000_000,
        buffer_initial_size: int = 1000,
        buffer_batch_size: int = 256,
        update_every: int = 1,
        gradient_steps: int = 1,
        start_steps: int | None = None,
        update_after: int = 0,
        return_steps: int = 1,
        tau: float = 0.005,
        prioritized: bool = False,
        priority_alpha: float = 0.6,
        priority_beta: float = 0.4,
        priority_beta_steps: int = 100_000,
        her: bool = False,
        her_goals: int = 4,
        her_strategy: str = 'future',
        jit_compile: bool | None = None,
        opt_epsilon: float = 1e-7,
        beta1: float = 0.9,
        beta2: float = 0.999,
        **kwargs,
    ) -> None:
        """
        Args:
            buffer_max_size: Replay buffer capacity in transitions (over all envs).
            buffer_initial_size: Transitions added to the buffer before learning starts.
            buffer_batch_size: Transitions per gradient step.
            update_every: Env steps (summed over envs, a multiple of n_envs) between updates.
            gradient_steps: Gradient steps per update, all run in one compiled call.
            start_steps: Env steps acted uniformly at random (default: buffer_initial_size).
            update_after: Env steps before the first update, if later than the buffer's initial fill.
            return_steps: Rewards summed into each sampled transition (n-step returns).
            tau: Polyak coefficient of the target networks (1 copies them).
            prioritized: Sample transitions in proportion to their TD error (Schaul et al. 2016).
            priority_alpha: Prioritised replay exponent alpha.
            priority_beta: Initial importance-sampling exponent, annealed to 1.
            priority_beta_steps: Env steps over which beta reaches 1.
            her: Hindsight experience replay on a goal env (Andrychowicz et al. 2017): replayed transitions get
                goals achieved later in their episode, rewards from the env's compute_reward.
            her_goals: Relabelled transitions per real one in a batch (SB3's n_sampled_goal: 4 relabels 4/5 of it).
            her_strategy: Where hindsight goals come from: future (a later step of the episode), final (its
                last step) or episode (any of its steps).
            jit_compile: Compile updates with XLA on TensorFlow (JAX always does); default: when every cfg model
                is a dense MLP (~5x faster for those on CPU, slower for wide or convolutional ones).
            opt_epsilon: Adam epsilon.
            beta1: Adam beta1.
            beta2: Adam beta2.
        """
        super().__init__(envs, **kwargs)
        self.optimizer_settings.update(epsilon=opt_epsilon, beta_1=beta1, beta_2=beta2)
        if buffer_initial_size > buffer_max_size:
            raise ValueError(f'expected buffer_initial_size <= buffer_max_size = {buffer_max_size}, '
                             f'got {buffer_initial_size}')
        if buffer_batch_size > buffer_initial_size:
            raise ValueError(f'expected buffer_batch_size <= buffer_initial_size = {buffer_initial_size}, '
                             f'got {buffer_batch_size}')
        if buffer_initial_size < return_steps * self.n_envs:
            raise ValueError(f'expected buffer_initial_size >= return_steps * n_envs = {return_steps * self.n_envs} '
                             f'(a complete {return_steps}-step window per env before the first update), '
                             f'got {buffer_initial_size}')
        if update_every % envs.num_envs:  # one vector step of the envs (of each worker) at a time
            raise ValueError(f'expected update_every to be a multiple of n_envs = {envs.num_envs}, '
                             f'got {update_every}')
        self.update_after = update_after
        self.buffer_max_size, self.buffer_initial_size = buffer_max_size, buffer_initial_size
        self.buffer_batch_size, self.update_every, self.gradient_steps = (
            buffer_batch_size, update_every, gradient_steps)
        self.start_steps = buffer_initial_size if start_steps is None else start_steps
        self.return_steps, self.tau, self.prioritized = return_steps, tau, prioritized
        self.jit_compile = jit_compile
        self.target_update_interval = 1
        space = envs.single_action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        if self.discrete:
            self.n_actions = int(space.n)
            stored_actions = gym.spaces.Discrete(self.n_actions)
        else:
            if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
                raise ValueError(f'{type(self).__name__} expected a bounded Box action space, got {space}')
            # Inside the agent a Box action is a vector in [-1, 1]^d; env_actions scales and shapes it.
            self.action_low, self.action_high = space.low.ravel(), space.high.ravel()
            stored_actions = gym.spaces.Box(-1.0, 1.0, self.action_low.shape, np.float32)
        if her_strategy not in STRATEGIES:
            raise ValueError(f'expected her_strategy {", ".join(STRATEGIES)}, got {her_strategy!r}')
        self.her = her
        if her:
            self.check_her(envs, return_steps, prioritized)
            compute_reward = goal_reward(envs)

            def replay_buffer(capacity: int) -> ReplayBuffer:
                return HerReplayBuffer(capacity, self.n_envs, envs.single_observation_space, stored_actions,
                                       compute_reward, her_goals, her_strategy, self.gamma,
                                       random_stream(self.seed, REPLAY))
        else:
            buffer_class = PrioritizedReplayBuffer if prioritized else ReplayBuffer
            buffer_kwargs = {'alpha': priority_alpha, 'beta': priority_beta,
                             'beta_steps': priority_beta_steps} if prioritized else {}

            def replay_buffer(capacity: int) -> ReplayBuffer:
                return buffer_class(capacity, self.n_envs, envs.single_observation_space, stored_actions,
                                    n_steps=return_steps, gamma=self.gamma, seed=random_stream(self.seed, REPLAY),
                                    frame_stack_axis=-1 if frame_stacked(envs) else None, **buffer_kwargs)

        per_transition = replay_buffer(self.n_envs * (return_steps + 1024)).bytes_per_transition  # pages untouched
        check_fits(f'a replay buffer of {buffer_max_size:,} transitions', per_transition * buffer_max_size,
                   'lower --buffer-max-size')
        self.buffer = replay_buffer(buffer_max_size)
        self.target_pairs: list[tuple[keras.Model, keras.Model]] = []
        # int32: JAX computes without 64-bit integers by default.
        self.gradient_updates = keras.Variable(0, dtype='int32', trainable=False, name='gradient_updates')
        self.episode_starts = np.ones(envs.num_envs, bool)

    def check_her(self, envs: gym.vector.VectorEnv, return_steps: int, prioritized: bool) -> None:
        """Refuse, in one line, what hindsight relabelling cannot serve: envs that are no goal envs (Atari frame
        stacks are none), n-step returns (a window's rewards would need a goal each) and prioritised replay (a
        relabelled transition is not the stored one its priority was measured on)."""
        check_goal_space(envs.single_observation_space)
        if return_steps > 1:
            raise ValueError(f'her relabels one-step transitions: expected return_steps 1, got {return_steps}')
        if prioritized:
            raise ValueError('her samples uniformly: prioritised replay ranks stored transitions, not relabelled '
                             'ones; drop prioritized or her')

    def training_state(self) -> dict:
        return {**super().training_state(), 'gradient_updates': int(self.gradient_updates.numpy())}

    def restore_training_state(self, state: dict) -> None:
        super().restore_training_state(state)
        self.gradient_updates.assign(state['gradient_updates'])

    def graph_variables(self) -> list:
        """The base's, and the gradient step counter that schedules target (and TD3's actor) updates."""
        return [*super().graph_variables(), self.gradient_updates]

    # ------------------------------------------------------------------- model helpers
    def build_target(self, role: str, online: keras.Model) -> keras.Model:
        """A copy of ``online`` that follows it by Polyak averaging (saved under ``role``)."""
        target = copy_model(online)
        if getattr(online, 'layer_graph', None) is not None:  # a cfg model's: the copy computes as directly
            target.layer_graph = online.layer_graph.of(target)
        target.set_weights(online.get_weights())
        target.trainable = False
        self.models[role] = target
        self.target_pairs.append((target, online))
        return target

    def build_critic(self, role: str, given, outputs: Sequence[Output], repeat_head: bool = False) -> keras.Model:
        """Build (or accept) a Q-model: its input is the observation, with the action appended
        for Box action spaces (then observations are flattened, and must not be images); with ``repeat_head`` a cfg's
        one output section serves every output, each with its own tower."""
        space = self.envs.single_observation_space
        if not self.discrete and isinstance(space, gym.spaces.Dict):  # the action: one more key, packed last
            action = 'action'
            while action in space.spaces:
                action = '_' + action
            space = DictObservations([*space.spaces.items(), (action, gym.spaces.Box(-1.0, 1.0, self.action_low.shape))])
        elif not self.discrete:
            if is_image_space(space):
                raise ValueError(f'{type(self).__name__} with Box actions expected vector observations, '
                                 f'got images shaped {space.shape}')
            size = int(np.prod(space.shape)) + int(np.prod(self.action_low.shape))
            space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        model = self.model_file(role, space, given)
        if not isinstance(model, str):
            model = self.own_network(role, model, space, outputs)
        else:
            model = build_model(model, space, outputs, name=role, precision=self.precision, repeat_head=repeat_head,
                                batch_renorm=self.batch_renorm)
        self.models[role] = model
        return model

    def q_values(self, model: keras.Model, observations, actions=None, training: bool = False):
        """Every head's Q-values: ``(heads, batch)`` of Box ``actions``, ``(heads, batch, n)`` without (the model in
        training mode with ``training``)."""
        if actions is None:
            return ops.stack(keras.tree.flatten(model(observations, training=training)))
        inputs = self.critic_inputs(observations, actions)
        return ops.stack(keras.tree.flatten(model(inputs, training=training)))[..., 0]

    @staticmethod
    def critic_inputs(observations, actions):
        """What a Q-model of Box actions takes: the observations, flattened, and the actions appended."""
        flat = ops.reshape(ops.cast(observations, 'float32'), (ops.shape(observations)[0], -1))
        return ops.concatenate([flat, ops.cast(actions, 'float32')], -1)

    # ------------------------------------------------------------------------ acting
    def random_actions(self, action_masks: np.ndarray | None = None) -> np.ndarray:
        """Uniform random actions for every env: indices (among those ``action_masks`` allow), or points of
        ``[-1, 1]^d``."""
        if action_masks is not None:
            return random_valid(self.rng, action_masks)
        if self.discrete:
            return self.rng.integers(0, self.n_actions, self.envs.num_envs)
        shape = (self.envs.num_envs,) + self.buffer.action_space.shape
        return self.rng.uniform(-1.0, 1.0, shape).astype(np.float32)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Agent actions as the env expects them: Box actions scaled from ``[-1, 1]`` to the bounds."""
        if self.discrete:
            return super().env_actions(actions)
        scaled = self.action_low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (self.action_high - self.action_low)
        return scaled.reshape((len(scaled),) + self.envs.single_action_space.shape)

    def env_actions_graph(self, actions):
        if self.discrete:
            return super().env_actions_graph(actions)
        low, high = self.action_low.astype(np.float32), self.action_high.astype(np.float32)
        # Constants as tensors: a NumPy array on the left would pull a PyTorch tensor into NumPy.
        scaled = ops.convert_to_tensor(low) + (ops.clip(actions, -1.0, 1.0) + 1.0) * ops.convert_to_tensor(
            0.5 * (high - low))
        return ops.reshape(scaled, (-1, *self.envs.single_action_space.shape))

    def explore(self, observations: np.ndarray) -> np.ndarray:
        """Training actions (agent space: indices, or ``[-1, 1]`` for Box) for a batch of observations."""
        raise NotImplementedError

    def policy(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        """Actions in the agent's space; ``act`` scales them for the env."""
        raise NotImplementedError

    def act(self, observations: np.ndarray, deterministic: bool = False,
            action_masks: np.ndarray | None = None) -> np.ndarray:
        observations, masks = self.normalized(observations), masked(action_masks)
        if deterministic:
            return self.env_actions(self.policy(observations, True, **masks))
        return self.env_actions(self.explore(observations, **masks))

    # ---------------------------------------------------------------------- training
    def explore_step(self) -> tuple[np.ndarray, ...]:
        """One vector step with training actions; the transition as the buffer takes it (observations raw:
        they are normalised with the statistics of each update)."""
        observations, masks = self.observations, self.masks
        seen = self.observe(observations)
        if self.steps < self.start_steps:
            actions = self.random_actions(masks)
        else:
            actions = self.explore(seen, **masked(masks))
        next_observations, rewards, terminated, truncated, finals = self.step_envs(actions)
        self.observations, self.episode_starts = next_observations, terminated | truncated
        transition = observations, actions, rewards, finals, terminated, truncated
        # With masks: those of the observations and of the final ones, what targets bootstrap over.
        return transition if masks is None else (*transition, masks, self.final_step_masks)

    def collect(self, vector_steps: int) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """A worker's segment: ``vector_steps`` transitions of every env, stacked ``(vector_steps, n_envs, ...)``,
        and with prioritised replay their :meth:`estimates` (else None)."""
        self.start_collection()
        transitions = tuple(map(np.stack, zip(*(self.explore_step() for _ in range(vector_steps)))))
        return transitions, self.estimates(transitions) if self.prioritized else None

    def train_once(self) -> dict[str, float]:
        if self.workers:  # Ape-X: the next segment any worker finishes, update_every env steps
            per_worker = self.envs.num_envs
            index, segment = self.pool.next(self, self.update_every // per_worker)
            columns = slice(index * per_worker, (index + 1) * per_worker)
            if segment.fresh:  # a new worker, or one restarted with fresh envs: its old episodes end here
                self.buffer.truncate(columns)
            transitions, values = segment.experience
            for t, transition in enumerate(zip(*transitions)):
                if values is None:
                    self.store(transition, columns=columns)
                else:  # Ape-X: priorities from the worker's estimates, not the running max
                    self.store(transition, columns=columns, values=values[:, t])
            self.take_segments([segment], per_worker)
        else:
            self.start_collection()
            for _ in range(self.update_every // self.n_envs):
                self.store(self.explore_step())
        if (self.buffer.steps < self.buffer_initial_size or self.steps < self.update_after
                or not self.buffer.can_sample()):
            return {}
        return self.update()

    def store(self, transition: tuple, **kwargs) -> None:
        """Add one of :meth:`explore_step`'s transitions to the buffer (its masks, if any, by name)."""
        masks = dict(zip(('action_masks', 'next_action_masks'), transition[6:]))
        self.buffer.add(*transition[:6], **masks, **kwargs)

    def worker_models(self) -> list[keras.Model]:
        # With prioritised replay a worker also estimates its transitions' TD errors: it needs every model.
        return list(self.models.values()) if self.prioritized else super().worker_models()

    def estimates(self, transitions: tuple[np.ndarray, ...]) -> np.ndarray:
        """What an Ape-X worker (Horgan et al. 2018) sends for the initial priorities of its ``transitions``
        (``(T, n_envs, ...)`` arrays in :meth:`explore_step`'s order): ``(2, T, n_envs)``, the first critic's
        ``Q(s, a)`` and the value ``V(s')`` the TD target bootstraps from, under its copy of the learner's
        networks, in one compiled call. The learner's buffer turns them into each n-step window's TD error as it
        computes the window's return, when the window is complete: the last n - 1 transitions of a segment
        complete theirs in the next one, so they take ``V(s')`` from the next segment's networks, one update on."""
        observations, actions, _, next_observations = transitions[:4]
        shape = actions.shape[:2]
        flat = [np.reshape(array, (-1, *np.shape(array)[2:])) for array in (observations, actions, next_observations)]
        next_masks = {} if len(transitions) < 8 else {
            'next_action_masks': np.reshape(transitions[7], (-1, transitions[7].shape[-1]))}
        values = self.compiled_estimates(self.normalized(flat[0]), flat[1].astype(self.buffer.action_space.dtype),
                                         self.normalized(flat[2]), **next_masks)
        return ops.convert_to_numpy(values).reshape(2, *shape)

    @functools.cached_property
    def compiled_estimates(self):
        """``(Q(s, a), V(s'))`` of a batch as one compiled call (see :meth:`estimates`)."""
        return backend.compiled(lambda observations, actions, next_observations, **masks: ops.stack([
            self.action_values(observations, actions)[0], self.next_values(next_observations, **masks)]),
            self.graph_variables)

    def worker_settings(self) -> dict:
        size = self.envs.num_envs * (self.return_steps + 8)  # a small buffer: workers only act
        # start_steps defaults to buffer_initial_size: the learner's, not the small buffer's.
        return {**super().worker_settings(), 'buffer_max_size': size, 'buffer_initial_size': size,
                'buffer_batch_size': 1, 'start_steps': self.start_steps}

    def update(self) -> dict:
        """Sample ``gradient_steps`` minibatches and train on them in one compiled call."""
        batch = self.buffer.sample(self.buffer_batch_size, self.gradient_steps)
        shape = (self.gradient_steps, self.buffer_batch_size)
        # The buffer keeps raw observations: they are scaled with the statistics of now.
        batch = batch._replace(observations=self.normalized(batch.observations),
                               next_observations=self.normalized(batch.next_observations))
        arrays = [array.reshape(shape + array.shape[1:]) for array in batch[:6]]
        masks = {} if batch.action_masks is None else {
            name: getattr(batch, name).reshape(shape + (-1,)) for name in ('action_masks', 'next_action_masks')}
        metrics, td_errors = self.compiled_train_steps(*arrays, **masks)
        if self.prioritized:
            self.buffer.update_priorities(batch.indices, ops.convert_to_numpy(td_errors).ravel())
        self.on_weights_changed()
        return metrics

    @functools.cached_property
    def compiled_train_steps(self):
        """:meth:`train_steps` as one compiled call (on TensorFlow XLA-compiled as ``jit_compile`` says)."""
        jit_compile = self.jit_compile
        if jit_compile is None:
            cfg_models = [model for model in self.models.values() if hasattr(model, 'layer_graph')]
            jit_compile = bool(cfg_models) and all(map(NumpyForward.supports, cfg_models))
        return backend.compiled(self.train_steps, self.graph_variables, jit_compile=jit_compile)

    def train_steps(self, observations, actions, rewards, next_observations, discounts, weights, **masks):
        """Run ``train_step`` on each of the ``(gradient_steps, batch, ...)`` batches in one loop of the compiled call
        (with the batches' ``action_masks`` and ``next_action_masks`` when the buffer holds masks).

        Returns:
            The last step's metrics and the TD errors ``(gradient_steps, batch)`` (priorities).
        """
        steps, batch_size = observations.shape[:2]  # static: one compilation per number of gradient steps
        columns = (observations, actions, rewards, next_observations, discounts, weights, *masks.values())

        def body(g, metrics, td_errors):
            step = [ops.take(column, g, axis=0) for column in columns]
            step_metrics, errors = self.train_step(*step[:6], **dict(zip(masks, step[6:])))
            td_errors = ops.slice_update(td_errors, (g, 0), ops.cast(errors, 'float32')[None])
            self.gradient_updates.assign_add(1)
            backend.cond(ops.equal(self.gradient_updates % self.target_update_interval, 0),
                         self.move_targets, lambda: ops.zeros(()))
            return g + 1, tuple(ops.cast(step_metrics[name], 'float32') for name in self.metric_names), td_errors

        _, metrics, td_errors = backend.while_loop(
            lambda g, *_: g < steps, body,
            (ops.convert_to_tensor(0, 'int32'), tuple(ops.zeros(()) for _ in self.metric_names),
             ops.zeros((steps, batch_size))))
        return dict(zip(self.metric_names, metrics)), td_errors

    def move_targets(self):
        """Move every target network towards its online one by Polyak averaging (a zero, as :func:`backend.cond`'s
        branches return alike)."""
        for target, online in self.target_pairs:
            polyak_update(target.weights, online.weights, self.tau)
        return ops.zeros(())

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights):
        """One gradient step on a batch (compiled into :meth:`train_steps`).

        Args:
            observations: ``(batch, *observation_shape)``.
            actions: ``(batch,)`` integer indices or ``(batch, action_dim)`` in ``[-1, 1]``.
            rewards: ``(batch,)`` discounted sums of up to ``return_steps`` rewards.
            next_observations: ``(batch, *observation_shape)``.
            discounts: ``(batch,)`` ``gamma ** k``, 0 where the episode terminated.
            weights: ``(batch,)`` importance-sampling weights (ones without prioritised replay).

        Returns:
            ``(metrics, td_errors)``: a dict with every name of ``metric_names`` and ``(batch,)``.
        """
        raise NotImplementedError

    def action_values(self, observations, actions):
        """``(heads, batch)`` Q-values of ``actions`` by each head of the online critic (traced)."""
        raise NotImplementedError

    def next_values(self, next_observations):
        """``(batch,)`` values ``V(s')`` the TD target ``rewards + discounts * V(s')`` bootstraps from (traced)."""
        raise NotImplementedError


def polyak_update(targets: Sequence[keras.Variable], sources: Sequence[keras.Variable], tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` for each pair; ``tau = 1`` copies."""
    for target, source in zip(targets, sources):
        target.assign(source if tau == 1 else target + tau * (source - target))

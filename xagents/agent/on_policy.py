"""OnPolicy: agents that learn from the rollout they just collected (A2C, PPO, TRPO): rollouts, gSDE exploration,
reward scaling, and GAE handed to the agent's ``train_step``."""
from __future__ import annotations

import inspect

import gymnasium as gym
import keras
import numpy as np
from keras import ops
from gymnasium.wrappers.utils import RunningMeanStd

from xagents.agent.base import BaseAgent
from xagents.replay.buffers import Rollout, RolloutBuffer
from xagents.maths.distributions import DiagGaussian, StateDependentNoise, distribution_for
from xagents.envs.masks import masked_logits, masked_logits_np
from xagents.utils.memory import check_fits
from xagents.networks.models import Output
from xagents.networks.recurrence import Memory, check_kind, in_sequences
from xagents.maths.returns import gae
from xagents.envs.spaces import flat_actions


def check_rollout_fits(observation_space: gym.Space, n_envs: int, n_steps: int) -> None:
    """Refuse a rollout that cannot fit in memory: its observations (and ~64 bytes of the rest a step), kept three
    times over (the rollout, its flattened copy for the update and the update's own tensors)."""
    if isinstance(observation_space, gym.spaces.Box):
        observation = observation_space.dtype.itemsize * int(np.prod(observation_space.shape))
    else:  # a Dict before packing: its keys as the float32 vector they pack into
        observation = 4 * gym.spaces.flatdim(observation_space)
    check_fits(f'a rollout of {n_steps:,} steps of {n_envs:,} envs', 3 * n_envs * (observation + 64) * n_steps,
               'lower --n-steps or --n-envs')

class OnPolicy(BaseAgent):
    """Agents that learn from the rollout they just collected (A2C, PPO, TRPO).

    Acting runs in NumPy on a copy of the weights when the model is a small MLP (a graph call
    costs more than the whole forward pass), otherwise in one compiled call per vector step.
    Truncated episodes are bootstrapped: ``gamma * V(final observation)`` joins the last reward.
    Actions may be Discrete, Box, MultiDiscrete (independent categoricals, one per sub-space) or
    MultiBinary (independent Bernoullis, one per bit); see :func:`xagents.maths.distributions.distribution_for`.
    With action masks, masked logits (:func:`xagents.envs.masks.masked_logits`) are what actions are drawn
    from and what log-probabilities and entropies are computed from, in collection and in every epoch.
    """

    supported_action_spaces = (gym.spaces.Discrete, gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
    masks_actions = True
    recurrent: str | None = None  # lstm or gru: the policy remembers (see setup_recurrence)
    sequence_length: int | None = None  # steps per training sequence of a recurrent policy
    memory: Memory | None = None  # the recurrent state of the envs this process steps

    def __init__(self, envs: gym.vector.VectorEnv, *, n_steps: int = 5, lam: float = 1.0,
                 normalize_rewards: bool = False, log_std_init: float = 0.0, use_sde: bool = False,
                 sde_sample_freq: int | None = None, opt_epsilon: float = 1e-7, beta1: float = 0.9,
                 beta2: float = 0.999, **kwargs) -> None:
        """
        Args:
            n_steps: Steps per env in each rollout.
            lam: GAE lambda (1 gives n-step returns).
            normalize_rewards: Divide the rewards the agent learns from by a running standard deviation
                of the discounted return, clipped to [-10, 10] (Baselines' VecNormalize, RL Zoo's
                normalize); scores stay the env's; the statistics are saved with the first model.
            log_std_init: Initial log standard deviation of Box actions (RL Zoo uses -2 on MuJoCo); with
                use_sde, of the noise matrix's entries.
            use_sde: Explore Box actions with generalised state-dependent noise (gSDE, Raffin et al.
                2021); a Keras model then returns [means, value, features].
            sde_sample_freq: Steps (per env) between new gSDE noise within a rollout (each rollout starts
                with new noise); default: only at the start of each rollout.
            opt_epsilon: Adam epsilon.
            beta1: Adam beta1.
            beta2: Adam beta2.
        """
        super().__init__(envs, **kwargs)
        self.optimizer_settings.update(epsilon=opt_epsilon, beta_1=beta1, beta_2=beta2)
        self.n_steps, self.lam, self.log_std_init = n_steps, lam, log_std_init
        self.use_sde, self.sde_sample_freq = use_sde, sde_sample_freq
        self.distribution = distribution_for(envs.single_action_space)
        if use_sde and not isinstance(self.distribution, DiagGaussian):
            raise ValueError('use_sde explores Box actions; this env\'s actions are discrete')
        self.sde = StateDependentNoise(sde_sample_freq) if use_sde else None
        space = self.observation_space  # (Dict observations packed)
        check_rollout_fits(space, self.n_envs, n_steps)
        # Filled by the envs this process steps (a learner with workers joins theirs instead).
        self.rollout = RolloutBuffer(n_steps, envs.num_envs, space, flat_actions(envs.single_action_space))
        self.return_stats = RunningMeanStd(shape=()) if normalize_rewards else None
        self.discounted_returns = np.zeros(envs.num_envs)  # per env, for return_stats

    @classmethod
    def check_memory(cls, observation_space: gym.Space, n_envs: int, settings: dict) -> None:
        """Refuse a rollout of ``n_envs`` envs that cannot fit in memory, before the envs are made."""
        n_steps = settings.get('n_steps', inspect.signature(cls.__init__).parameters['n_steps'].default)
        check_rollout_fits(observation_space, n_envs, n_steps)

    def policy_outputs(self) -> list[Output]:
        """The outputs of an actor-critic model: distribution parameters and a value."""
        return [Output('policy', self.distribution.output_units()), Output('value', 1)]

    def setup_recurrence(self, recurrent: str | None, sequence_length: int | None, mini_batches: int = 1) -> int:
        """Take a recurrent policy's settings (before :meth:`build_actor_critic`); return the rows an update
        divides into minibatches: the rollout's samples, or with ``recurrent`` its sequences of
        ``sequence_length`` steps (default: the longest that divides ``n_steps`` and gives each of ``mini_batches``
        as many sequences, ``n_steps`` when they divide ``n_envs``: each env's whole rollout, as CleanRL's
        ``ppo_atari_lstm``).

        A recurrent policy keeps a state per env, zeroed where an episode starts; the update replays each sequence
        from the state stored when its first step was collected, resetting inside it where episodes start.
        """
        check_kind(recurrent)
        if sequence_length is not None and not recurrent:
            raise ValueError("sequence_length is for recurrent policies: give recurrent='lstm' or 'gru' too")
        if not recurrent:
            return self.n_steps * self.n_envs
        length = sequence_length or max((length for length in range(1, self.n_steps + 1) if not self.n_steps % length
                                         and not self.n_envs * self.n_steps // length % mini_batches),
                                        default=self.n_steps)
        if length < 1 or self.n_steps % length:
            raise ValueError(f'expected sequence_length to divide n_steps = {self.n_steps}, got {length}')
        self.recurrent, self.sequence_length = recurrent, length
        return self.n_envs * self.n_steps // length

    def build_actor_critic(self, model) -> keras.Model:
        """Build the actor-critic model (with the memory :meth:`setup_recurrence` asked for) and, for Box actions,
        its learned ``log_std``."""
        model = self.with_log_std(self.build('model', model, self.policy_outputs(), features=self.use_sde,
                                             recurrent=self.recurrent))
        if self.recurrent:
            self.state_size = int(model.outputs[-1].shape[-1])
            self.memory = self.new_memory(self.envs.num_envs)
            self.rollout.keep_memory(self.state_size)
        self.act_with(model)
        return model

    def new_memory(self, batch: int) -> Memory | None:
        if not self.recurrent:
            return None
        return Memory.zeros(batch, self.state_size)

    def act_with(self, *models: keras.Model) -> None:
        """Act with ``models``, whose outputs are the distribution parameters then the value (one
        actor-critic model, or an actor and a critic)."""
        self.policy_and_value = self.acting(*models)
        self.on_weights_changed()

    def with_log_std(self, policy: keras.Model) -> keras.Model:
        """For Box actions, give ``policy`` a learned ``log_std`` (saved with it): state-independent ``(d,)``,
        or with gSDE the ``(features, d)`` log sigma of the noise matrix."""
        if isinstance(self.distribution, DiagGaussian) and not hasattr(policy, 'log_std'):
            shape = (self.distribution.dim,)
            if self.use_sde:  # (build checked the outputs: means, value, features, then a recurrent state)
                shape = (policy.outputs[-2 if self.recurrent else -1].shape[-1], self.distribution.dim)
            policy.log_std = policy.add_weight(shape=shape, name='log_std',
                                               initializer=keras.initializers.Constant(self.log_std_init))
        return policy

    def on_weights_changed(self) -> None:
        super().on_weights_changed()
        policy = self.models.get(self.model_roles[0])
        self.log_std_np = policy.log_std.numpy() if hasattr(policy, 'log_std') else None

    def forward(self, observations: np.ndarray, memory: Memory | None = None
                ) -> tuple[np.ndarray | tuple[np.ndarray, np.ndarray], np.ndarray]:
        """Distribution parameters (with gSDE: means and features) and values ``(B,)`` for a batch of observations;
        a recurrent policy acts from ``memory`` and leaves the state after this step in ``memory.next_state``."""
        if self.recurrent:
            *outputs, memory.next_state = self.policy_and_value(observations, *memory.inputs())
        else:
            outputs = self.policy_and_value(observations)
        params, values, *features = outputs
        return (params, *features) if features else params, values[:, 0]

    def final_values(self, finals: np.ndarray) -> np.ndarray:
        if not self.recurrent:
            return super().final_values(finals)
        # A final observation follows the step just taken: the state after it, no episode start.
        after = Memory(self.memory.next_state, np.zeros(len(finals), bool))
        return self.forward(self.normalized(finals), after)[1]

    def policy_value(self, observations, sequences: tuple | None = None) -> tuple:
        """Graph-mode :meth:`forward` of the actor-critic model; a recurrent one runs over ``sequences``,
        ``(episode_starts (B, T), states (B, S))`` of the ``B * T`` env-major ``observations``."""
        if sequences is None:
            outputs = self.model(observations)
        else:
            *outputs, _ = self.model([observations, *sequences])
        params, values, *features = outputs
        return (params, *features) if features else params, values

    @staticmethod
    def named_columns(observations, actions, log_probs, advantages, returns, action_masks=None, sequences=None) -> dict:
        """:meth:`train_step`'s arguments by name (``old_log_probs`` for ``log_probs``), without those not given."""
        columns = {'observations': observations, 'actions': actions, 'old_log_probs': log_probs,
                   'advantages': advantages, 'returns': returns, 'action_masks': action_masks, 'sequences': sequences}
        return {name: column for name, column in columns.items() if column is not None}

    @staticmethod
    def minibatch_of(columns: dict, indices: object | None = None) -> dict:
        """Rows ``indices`` (default all) of an update's ``columns``: samples, or whole sequences of a recurrent
        policy (with ``sequences`` among the columns), their steps then flattened env-major as its model takes them."""
        if indices is not None:
            columns = keras.tree.map_structure(lambda column: ops.take(column, indices, axis=0), columns)
        if 'sequences' not in columns:
            return columns
        return {name: column if name == 'sequences' else ops.reshape(column, (-1, *column.shape[2:]))
                for name, column in columns.items()}

    def sample_actions(self, params, deterministic: bool = False, masks: np.ndarray | None = None):
        """Actions drawn from the distributions of ``params`` (their modes if ``deterministic``) within the action
        ``masks`` ``(B, n)`` if given, with their log-probabilities."""
        if self.sde:
            mean, features = params
            if deterministic:
                return self.distribution.sample_np(mean, self.log_std_np, self.rng, True)
            noise = self.sde.noise(features, self.log_std_np, self.rng)
            log_std = StateDependentNoise.log_std_np(features, self.log_std_np)
            return self.distribution.with_log_probs(mean + noise, noise * np.exp(-log_std), log_std)
        if self.log_std_np is not None:
            return self.distribution.sample_np(params, self.log_std_np, self.rng, deterministic)
        return self.distribution.sample_np(masked_logits_np(params, masks), self.rng, deterministic)

    def log_prob_entropy(self, params, actions, masks: object | None = None) -> tuple:
        """Graph-mode log-probabilities of ``actions`` and entropies under ``params`` (within ``masks``)."""
        if isinstance(self.distribution, DiagGaussian):
            log_std = self.models[self.model_roles[0]].log_std  # the policy's
            if self.sde:
                params, features = params
                log_std = StateDependentNoise.log_std(features, log_std)
            return (self.distribution.log_prob(params, log_std, actions),
                    self.distribution.entropy(params, log_std))
        params = masked_logits(params, masks)
        return self.distribution.log_prob(params, actions), self.distribution.entropy(params)

    def act(self, observations: np.ndarray, deterministic: bool = False,
            action_masks: np.ndarray | None = None, memory: Memory | None = None) -> np.ndarray:
        params = self.forward(self.normalized(observations), memory)[0]
        actions, _ = self.sample_actions(params, deterministic, action_masks)
        return self.env_actions(actions)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        if isinstance(self.distribution, DiagGaussian):
            return self.distribution.clip(actions)
        return super().env_actions(actions)

    def greedy_graph(self, observations, action_masks: object | None = None,
                     memory: tuple | None = None):
        policy = self.models[self.model_roles[0]]
        if memory is None:
            params = keras.tree.flatten(policy(observations))[0]  # (the means with gSDE)
            return self.distribution.mode(masked_logits(params, action_masks))  # (masks: Discrete actions only)
        starts, states = memory
        outputs = policy([observations, ops.cast(starts, 'float32')[:, None], states])
        return self.distribution.mode(masked_logits(outputs[0], action_masks)), outputs[-1]

    def env_actions_graph(self, actions):
        if isinstance(self.distribution, DiagGaussian):
            space = self.envs.single_action_space
            clipped = ops.clip(actions, space.low.ravel(), space.high.ravel())
            return ops.reshape(clipped, (-1, *space.shape))
        return super().env_actions_graph(actions)

    def collect(self) -> Rollout:
        """Fill the rollout buffer with ``n_steps`` vector steps from every env."""
        rollout, memory = self.rollout, self.memory
        self.start_collection()
        for t in range(self.n_steps):
            observations = self.observe(self.observations)
            params, values = self.forward(observations, memory)
            rollout.store_masks(t, self.masks)
            rollout.store_memory(t, memory)
            actions, log_probs = self.sample_actions(params, masks=self.masks)
            next_observations, rewards, terminated, truncated, finals = self.step_envs(actions)
            rollout.observations[t] = observations
            rollout.actions[t] = actions
            rollout.values[t] = values
            rollout.log_probs[t] = log_probs
            rollout.dones[t] = terminated | truncated
            rewards = self.scaled_rewards(rewards, terminated | truncated)
            rewards = self.bootstrapped(rewards, terminated, truncated, finals)
            rollout.rewards[t] = rewards
            self.observations = next_observations
            if memory:
                memory.advance(terminated | truncated)
        return rollout.filled(self.forward(self.normalized(self.observations), memory)[1])

    def scaled_rewards(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Rewards as the agent learns from them: divided by the return's running std when normalising."""
        stats = self.return_stats
        if stats is None:
            return rewards
        self.discounted_returns = self.discounted_returns * self.gamma + rewards
        stats.update(self.discounted_returns)
        self.discounted_returns[dones] = 0.0
        return np.clip(rewards / np.sqrt(stats.var + 1e-8), -10.0, 10.0)

    def running_statistics(self) -> dict[str, RunningMeanStd]:
        return {**super().running_statistics(), **({} if self.return_stats is None else {'return': self.return_stats})}

    def worker_settings(self) -> dict:
        # A worker's rollout is 1 / workers of the learner's batch, which its minibatches need not divide.
        return {**super().worker_settings(), **({'mini_batches': 1} if 'mini_batches' in self.parameter_names() else {})}

    def train_once(self) -> dict[str, float]:
        rollout = self.gathered()
        advantages, returns = gae(rollout.rewards, rollout.values, rollout.dones, rollout.last_values,
                                  self.gamma, self.lam)
        columns = (rollout.observations, rollout.actions, rollout.log_probs, advantages, returns) + (
            () if rollout.action_masks is None else (rollout.action_masks,))
        if self.recurrent:  # (E * T / L, L, ...) sequences, each from the state stored at its first step
            *columns, starts = in_sequences(self.sequence_length, *columns, rollout.episode_starts)
            # Each sequence's first state, in the same env-major order: (T / L, E, S) -> (E * T / L, S).
            states = np.swapaxes(rollout.states[::self.sequence_length], 0, 1).reshape(-1, self.state_size)
            extra = {'sequences': (starts, states)}
        else:  # (T * E, ...) samples
            columns, extra = [column.reshape(-1, *column.shape[2:]) for column in columns], {}
        if rollout.action_masks is not None:
            *columns, extra['action_masks'] = columns
        metrics = self.train_step(*columns, **extra)
        self.on_weights_changed()
        return metrics

    def train_step(self, observations, actions, log_probs, advantages, returns, action_masks=None,
                   sequences=None) -> dict:
        """One update (one compiled call in each agent) from a flattened rollout, or for a recurrent policy from
        ``(N, L, ...)`` sequences with ``sequences = (episode_starts (N, L), states (N, S))`` (see
        :meth:`minibatch_of`); ``action_masks`` ``(..., n)`` when the envs gave masks."""
        raise NotImplementedError

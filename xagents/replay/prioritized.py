"""Prioritised replay (Schaul et al. 2016): a sum tree of priorities and the replay buffer that samples by it."""
from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np

from xagents.replay.buffers import MAX_REDRAWS, ReplayBatch, ReplayBuffer

logger = logging.getLogger(__name__)


class SumTree:
    """Array-based binary sum tree with batched updates and a vectorised prefix-sum search.

    Node ``i``'s children are ``2i`` and ``2i + 1``, the root is node 1 and the leaves are the
    last ``leaf_count`` (a power of two) nodes. Every operation loops over the tree's levels,
    never over the items of a batch.
    """

    def __init__(self, size: int) -> None:
        """Create ``size`` leaves of value 0."""
        if size < 1:
            raise ValueError(f'expected size >= 1, got {size!r}')
        self.size = size
        self._depth = (size - 1).bit_length()
        self._leaf_start = 1 << self._depth
        self._nodes = np.zeros(2 * self._leaf_start)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._nodes[1])

    @property
    def nbytes(self) -> int:
        return self._nodes.nbytes

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._nodes[self._leaf_start + np.asarray(indices)]

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves ``indices`` to ``values`` (the last one wins on repeats) and refresh sums."""
        indices = np.asarray(indices, np.int64)
        values = np.broadcast_to(np.asarray(values, np.float64), indices.shape)
        # NumPy leaves the winner of repeated fancy-index writes unspecified: keep the last.
        last = len(indices) - 1 - np.unique(indices[::-1], return_index=True)[1]
        nodes = self._leaf_start + indices[last]
        self._nodes[nodes] = values[last]
        for _ in range(self._depth):
            nodes = nodes // 2  # repeated parents get the same sum twice, which is harmless
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Leaf ``i`` of each prefix sum ``u``: ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])``."""
        u = np.array(prefix_sums, np.float64)
        nodes = np.ones(len(u), np.int64)
        for _ in range(self._depth):
            left = self._nodes[2 * nodes]
            right = u >= left
            u -= left * right
            nodes = 2 * nodes + right
        return nodes - self._leaf_start


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritised replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    Transition ``i`` is sampled with probability ``P(i) = p_i ** alpha / sum_k p_k ** alpha``, with
    ``p_i = |td_error_i| + epsilon`` after ``update_priorities``, or the largest ``p`` seen so far
    when it is stored (unless it came with an actor's estimates, see ``add``). Importance weights
    ``w_i = (N * P(i)) ** -beta / max_j w_j`` are normalised by the batch's largest weight (as
    Dopamine's Rainbow does), so ``N`` cancels.
    ``beta`` grows linearly from its initial value to 1 over ``beta_steps`` added transitions.

    Storage, n-step returns and frame stacks are those of ``ReplayBuffer`` (this class only
    changes how slots are drawn), so ``frame_stack_axis`` works here too. A transition enters the
    sum tree once its n-step window is complete.
    """

    def __init__(self, capacity: int, n_envs: int, observation_space: gym.Space,
                 action_space: gym.Space, n_steps: int = 1, gamma: float = 0.99,
                 seed: int | np.random.Generator | None = None, frame_stack_axis: int | None = None,
                 alpha: float = 0.6, beta: float = 0.4, beta_steps: int = 1_000_000,
                 epsilon: float = 1e-6) -> None:
        """Allocate the storage and the sum tree.

        Args:
            capacity: See ``ReplayBuffer``.
            n_envs: See ``ReplayBuffer``.
            observation_space: See ``ReplayBuffer``.
            action_space: See ``ReplayBuffer``.
            n_steps: See ``ReplayBuffer``.
            gamma: See ``ReplayBuffer``.
            seed: See ``ReplayBuffer``.
            frame_stack_axis: See ``ReplayBuffer``.
            alpha: Priority exponent, 0 for uniform sampling.
            beta: Initial importance-sampling exponent.
            beta_steps: Added transitions (over all envs) after which beta reaches 1.
            epsilon: Added to ``|td_error|`` so that no transition has priority 0.
        """
        super().__init__(capacity, n_envs, observation_space, action_space, n_steps, gamma, seed,
                         frame_stack_axis)
        if alpha < 0:
            raise ValueError(f'expected alpha >= 0, got {alpha!r}')
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f'expected 0 <= beta <= 1, got {beta!r}')
        if beta_steps < 1:
            raise ValueError(f'expected beta_steps >= 1, got {beta_steps!r}')
        if epsilon <= 0:
            raise ValueError(f'expected epsilon > 0, got {epsilon!r}')
        self.alpha, self.initial_beta, self.beta_steps = alpha, beta, beta_steps
        self.epsilon = epsilon
        self.max_priority = 1.0
        self.tree = SumTree(self._rows * n_envs)
        # An actor's (Q(s, a), V(s')) of each transition, where it sent them (see add).
        self._estimates = np.zeros((self._rows, n_envs, 2), np.float32)
        self._estimated = np.zeros((self._rows, n_envs), bool)

    @property
    def beta(self) -> float:
        """Current importance-sampling exponent."""
        progress = min(1.0, self.steps / self.beta_steps)
        return self.initial_beta + (1.0 - self.initial_beta) * progress

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays and the sum tree."""
        return super().nbytes + self.tree.nbytes + self._estimates.nbytes + self._estimated.nbytes

    def add(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_observations: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            columns: slice | None = None, values: np.ndarray | None = None, action_masks: np.ndarray | None = None,
            next_action_masks: np.ndarray | None = None) -> None:
        """Store one vector step (see ``ReplayBuffer.add``) and give completed windows priority.

        Args:
            values: ``(2, n)``, an actor's estimates for these transitions: the ``Q(s, a)`` it learns and
                the value ``V(s')`` its target bootstraps from (``target = r + discount * V(s')``). A
                window starting and ending in transitions that came with them enters at the priority
                of its n-step TD error, ``|Q(s, a) - (R + discount * V(s'_last))| + epsilon``, as Ape-X
                actors compute it (Horgan et al. 2018, https://arxiv.org/abs/1803.00933); other windows
                at the largest priority seen so far.
        """
        envs = self._envs if columns is None else self._envs[columns]
        positions = self._positions[envs]
        if values is not None:
            values = self._check_array('values', values, (2, len(envs)))
        super().add(observations, actions, rewards, next_observations, terminated, truncated, columns,
                    action_masks, next_action_masks)
        rows = positions % self._rows
        self._estimated[rows, envs] = values is not None
        if values is not None:
            self._estimates[rows, envs] = values.T
        n = self.n_envs
        # The two slots written per env leave the tree (a transition's slot re-enters below when
        # its window is complete), then transitions of the last n_steps adds whose window this
        # step completed enter it. Slots written now hold no priority yet: treat them as 0.
        written = (np.concatenate([positions % self._rows, (positions + 1) % self._rows]) * n
                   + np.tile(envs, 2))
        back = np.arange(self.n_steps)[:, None]
        candidates = (((positions - back) % self._rows) * n + envs).ravel()
        unset = (self.tree[candidates] == 0) | np.isin(candidates, written)
        fresh = candidates[self._valid(candidates) & unset]
        self.tree.update(np.concatenate([written, fresh]),
                         np.concatenate([np.zeros(len(written)), self._initial_priorities(fresh)]))

    def truncate(self, columns: slice | None = None) -> np.ndarray:
        """End the episodes in progress (see ``ReplayBuffer.truncate``); the windows the cut completes
        enter the tree."""
        envs = super().truncate(columns)
        last = self._positions[envs] - 2  # the cut episode's last transition
        candidates = (((last - np.arange(self.n_steps)[:, None]) % self._rows) * self.n_envs + envs).ravel()
        fresh = candidates[self._valid(candidates) & (self.tree[candidates] == 0)]
        self.tree.update(fresh, self._initial_priorities(fresh))
        return envs

    def _initial_priorities(self, indices: np.ndarray) -> np.ndarray:
        """``priority ** alpha`` of transitions whose windows are complete: from the estimates stored
        with the window's first and last transitions (see ``add``), else the largest priority seen."""
        rows, envs = indices // self.n_envs, indices % self.n_envs
        priorities = np.full(len(indices), self.max_priority)
        estimated = np.flatnonzero(self._estimated[rows, envs])  # the local path stops here
        if len(estimated):
            rows, envs = rows[estimated], envs[estimated]
            window = self._window(rows, envs)
            td_errors = self._estimates[rows, envs, 0] - (
                window.returns + window.discounts * self._estimates[window.last_rows, envs, 1])
            known = self._estimated[window.last_rows, envs]
            priorities[estimated[known]] = np.abs(td_errors[known]) + self.epsilon
            if known.any():
                self.max_priority = max(self.max_priority, float(priorities.max()))
        return priorities ** self.alpha

    def sample(self, batch_size: int, batches: int = 1) -> ReplayBatch:
        """Sample transitions in proportion to their priority, each minibatch stratified.

        Every minibatch is a stratified sample of the whole buffer: its ``batch_size`` draws
        fall one in each of ``batch_size`` equal parts of the priority mass, as in the paper.

        Args:
            batch_size: Transitions per minibatch.
            batches: Minibatches drawn at once (an agent's gradient steps of one update).

        Returns:
            A ``ReplayBatch`` of ``batches * batch_size`` transitions, minibatch after minibatch,
            with importance weights (normalised by each minibatch's largest) and the slot
            ``indices`` to update.
        """
        self._check_batch_size(batch_size, batches)
        if self.tree.total <= 0:
            raise ValueError(
                f'expected at least one sampleable transition (complete {self.n_steps}-step '
                f'window), got none among {len(self)} stored: add more steps before sampling')
        total = self.tree.total
        strata = (np.arange(batch_size) + self.rng.random((batches, batch_size))) * (total / batch_size)
        indices = self.tree.find(strata.ravel())
        bad = ~self._sampleable(indices)
        for _ in range(MAX_REDRAWS):
            if not bad.any():
                break
            # Only frames overwritten under old transitions (or rounding) get here: drop them.
            self.tree.update(indices[bad & (indices < self.tree.size)], 0.0)
            total = self.tree.total
            if total <= 0:
                raise ValueError('expected at least one sampleable transition, got none')
            indices[bad] = self.tree.find(self.rng.random(np.count_nonzero(bad)) * total)
            bad = ~self._sampleable(indices)
        else:
            raise RuntimeError('prioritised sampling kept drawing unsampleable slots')
        probabilities = self.tree[indices] / total
        weights = (probabilities ** -self.beta).reshape(batches, batch_size)
        return self._batch(indices, (weights / weights.max(axis=1, keepdims=True)).ravel())

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of sampled transitions to ``|td_errors| + epsilon``.

        Args:
            indices: ``(batch,)`` the ``indices`` of a ``ReplayBatch``.
            td_errors: ``(batch,)`` TD errors of those transitions.
        """
        indices = np.asarray(indices)
        td_errors = np.asarray(td_errors, np.float64)
        if indices.ndim != 1 or td_errors.shape != indices.shape:
            raise ValueError(f'expected indices and td_errors of one shape (batch,), got '
                             f'{indices.shape} and {td_errors.shape}')
        if len(indices) and not (0 <= indices.min() and indices.max() < self.tree.size):
            raise ValueError(f'expected indices in [0, {self.tree.size}), got values from '
                             f'{indices.min()} to {indices.max()}')
        priorities = np.abs(td_errors) + self.epsilon
        live = self.tree[indices] > 0  # slots overwritten since sampling stay out of the tree
        self.tree.update(indices[live], priorities[live] ** self.alpha)
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))

    def _sampleable(self, indices: np.ndarray) -> np.ndarray:
        inside = indices < self.tree.size
        safe = np.where(inside, indices, 0)
        return inside & (self.tree[safe] > 0) & self._valid(safe)

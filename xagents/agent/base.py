"""BaseAgent: envs, models and optimizers, observation normalisation, env stepping, and the acting contract
(``act`` / ``collect`` / ``train_once``) that :class:`~xagents.agent.on_policy.OnPolicy` and
:class:`~xagents.agent.off_policy.OffPolicy` fill for their families.

The user's face (``fit predict save load evaluate export play``) is here as thin methods: what a run does lives
in :mod:`xagents.training` (a :class:`~xagents.training.run.Run` and its callbacks), what files record in
:mod:`xagents.agent.persistence`, exporting and playing in :mod:`xagents.app`.
"""
from __future__ import annotations

import importlib.resources
import inspect
import logging
import os
from types import SimpleNamespace
from typing import Sequence

import gymnasium as gym
import xagents.utils.quiet_keras  # noqa: F401  (first: Keras loads quietly)
import keras
from keras import ops
import numpy as np
import numpy.typing as npt
from gymnasium.wrappers.utils import RunningMeanStd

from xagents import backend
from xagents.agent import persistence
from xagents.agent.construction import capped_initial_size, constructor, with_run_defaults
from xagents.agent.observing import Observing
from xagents.agent.stepping import EnvStepping
from xagents.agent.worker_side import WorkerSide
from xagents.training.callbacks import Callback, checked_callbacks
from xagents.training.distributed import WorkerPool
from xagents.training.evaluation import EvaluationResult, evaluate
from xagents.training.fit import train
from xagents.training.run import Episode, Run
from xagents.maths.distributions import StateDependentNoise
from xagents.envs.creation import ENV_PARAMETERS, create_envs
from xagents.storage.history import History
from xagents.envs.masks import mask_kwargs, mask_size
from xagents.networks import own, residual
from xagents.networks.models import (PRECISIONS, Forward, Output, build_model, check_model, check_precision,
                                  computing_in_float32, is_image_space)
from xagents.utils.names import unknown_method, unknown_parameter
from xagents.envs.presets import names_env, read_presets
from xagents.networks.recurrence import Memory, given_memory, memory_kwargs
from xagents.envs.spaces import agents_taking, check_action_space, one_line
from xagents.utils.streams import ACTING, random_stream
from xagents.utils.validation import KEPT, RENAMED, validated

logger = logging.getLogger('xagents')


class BaseAgent(Observing, EnvStepping, WorkerSide):
    """Base of every agent: hyperparameters, models, envs and the training loop that ``fit`` drives.

    Subclasses declare ``supported_action_spaces`` and ``model_roles`` (the models saved by
    ``--checkpoints``, in order), build their models and optimizers, and implement
    :meth:`train_once` (through :class:`OnPolicy` / :class:`OffPolicy`) and :meth:`act`.
    """

    supported_action_spaces: tuple[type[gym.Space], ...] = (gym.spaces.Discrete, gym.spaces.Box)
    masks_actions = False  # acts and learns within action masks when the env offers them
    model_roles: tuple[str, ...] = ('model',)
    batch_renorm: dict | None = None  # the settings of cfg batch renormalisation layers, where the agent trains them
    network_variant = ''  # '-simba': the packaged SimBa networks (see the simba parameter)
    dense_variant = ''  # the packaged dense cfgs built by default: models/ann-<role><dense_variant>.cfg (SAC: '-256')
    dense_variant_since = (2, 1)  # the xagents version from which dense_variant is the default (64-64 before)
    sde: StateDependentNoise | None = None  # gSDE exploration noise, for agents that use it
    def __init_subclass__(cls, **kwargs) -> None:
        """Every agent's constructor takes renamed parameters by their old names for a release, and checks
        its arguments by kind (``xagents.utils.validation``)."""
        super().__init_subclass__(**kwargs)
        if '__init__' in vars(cls):
            cls.__init__ = constructor(validated(cls.__init__))

    @validated
    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        *,
        lr: float = 7e-4,
        lr_decay_steps: int | None = None,
        gamma: float = 0.99,
        seed: int | None = None,
        normalize_observations: bool | None = None,
        workers: int | None = None,
        action_masks: bool = True,
        precision: str = 'float32',
        simba: bool = False,
    ) -> None:
        """Check the env against the agent and set up the shared machinery.

        Args:
            envs: A Gymnasium vector env (see ``xagents.envs.creation.create_envs``).
            lr: Learning rate.
            lr_decay_steps: Anneal learning rates linearly to 0 over this many steps (RL Zoo's schedule).
            gamma: Discount factor.
            seed: Seed for TensorFlow, NumPy action sampling and the envs; same seed, same history.
            normalize_observations: Scale vector observations by their running mean and standard deviation,
                clipped (Baselines' VecNormalize and DDPG, RL Zoo's normalize; not with simba); the statistics
                are updated while collecting only, frozen when acting outside training, and saved with
                the first model. Default: on when the observations hold a grid (a uint8 image too small for
                the Nature CNN, such as MiniGrid's 7x7 ids, whose values are no intensities), else off.
            workers: Collect experience on this many Ray workers, each with n_envs envs (the distributed
                extra); the agent learns from workers x n_envs envs, so this sets its batch.
            action_masks: Act only on the actions the env allows, when it says which (its action_masks(), as
                SB3-contrib's, or info['action_mask'], as Gymnasium's Taxi): in acting, exploring and learning
                (Discrete actions; PPO, A2C, TRPO, DQN and SAC). Off: masks are ignored, for comparison.
            precision: ``float32``, or ``bf16``: the hidden layers of .cfg models compute in bfloat16 (Keras'
                ``mixed_bfloat16``; about 1.5-2x faster convolutions on CPUs with AVX512-BF16 or AMX, and on GPUs),
                while weights, optimizer state, outputs and losses stay float32.
            simba: Build the packaged SimBa networks (Lee et al. 2024: an embedding, residual blocks of layer norm,
                a 4x wider ReLU layer and a skip, a final layer norm; ``ann-<role>-simba.cfg``) in place of the default
                and preset ones (every agent), trained as SBX's: AdamW with weight decay 1e-4 where Adam would be, and
                normalize_observations on unless given, unclipped (vector and Dict observations; ``networks.residual``).
        """
        if precision not in PRECISIONS:
            raise ValueError(f'precision takes {" or ".join(PRECISIONS)}, got {precision!r}')
        self.precision = precision
        self.network_variant, self.observation_clip = residual.simba_settings(simba, self.observation_clip)
        if simba and normalize_observations is None and not is_image_space(envs.single_observation_space):
            normalize_observations = True  # SimBa's running-statistics normalisation of the inputs
        self.setup_observations(envs.single_observation_space, normalize_observations)
        if not isinstance(envs.single_action_space, self.supported_action_spaces):
            supported = ', '.join(space.__name__ for space in self.supported_action_spaces)
            raise ValueError(
                f'{type(self).__name__} supports {supported} action spaces, '
                f'got {one_line(envs.single_action_space)} ({agents_taking(envs.single_action_space)})'
            )
        check_action_space(envs.single_action_space, type(self).__name__)
        self.envs = envs
        self.workers = workers
        self.action_masks = action_masks
        # Masks of the observations the envs last returned ((n_envs, n) booleans), and of a step's final
        # observations; None while the envs offer none or masking is off.
        self.masks: np.ndarray | None = None
        self.final_step_masks: np.ndarray | None = None
        self.n_envs = envs.num_envs * (workers or 1)  # the envs the agent learns from: workers x n_envs
        self.pool: WorkerPool | None = None  # the workers of the fit in progress
        self.gamma = gamma
        self.seed = seed
        self.run_defaults: dict = {}  # fit's settings for this agent where a call gives none (from_env's presets)
        self.generic_env: str | None = None  # from_env's env id when no preset names it (see StallHint)
        if seed is not None:
            backend.seed_everything(seed)
        self.rng = random_stream(seed, ACTING)
        # Randomness inside compiled updates (minibatch orders, target noise, sampled actions), seeded by the
        # agent's seed and saved with it: keras.random draws from it the same way on every backend.
        self.graph_random = keras.random.SeedGenerator(seed)
        self.optimizer_settings = {'learning_rate': lr}  # Adam's, for make_optimizer's default
        self.lr_decay_steps = lr_decay_steps
        self.lr_factor = 1.0  # product of plateau reductions
        self.initial_learning_rates: dict[str, float] = {}
        self.history = History(None, self.identity())  # every finished episode, across runs (fit names its file)
        self.models: dict[str, keras.Model] = {}
        self.optimizers: dict[str, keras.optimizers.Optimizer] = {}
        self.steps = 0  # env steps taken, over all runs: the clock of every schedule
        self.weights_loaded: list[str] = []
        self.written_save_dirs: set[str] = set()  # save_dirs of earlier fits (real paths): later fits go on there
        self.training_started = False  # envs reset and stepped by a run
        self.forwards: list[Forward] = []  # acting passes, refreshed when weights change
        self._weights_version = 0  # counts weight changes: workers get new weights when it moves
        self.finished_episodes: list[Episode] = []  # since the run last took them

    def __getattr__(self, name: str):
        """Called only for an attribute the agent lacks: a Stable-Baselines3 method (``learn``) is answered with
        the xagents way (:data:`xagents.utils.names.SB3_METHODS`)."""
        raise unknown_method(type(self).__name__, name)

    # ----------------------------------------------------------------- construction helpers
    @classmethod
    def defaults_before(cls, saved_by: tuple[int, ...], settings: dict, envs: gym.vector.VectorEnv) -> dict:
        """The settings whose default has changed since the xagents version ``saved_by`` that wrote a save, as
        they were then, for the saved ``settings`` that leave them to the default: a save goes on as it trained."""
        return {}

    @classmethod
    def default_hyperparameters(cls, env_id: str) -> dict:
        """Tuned defaults for ``env_id`` from the agent's ``hyperparameters.json``.

        The file maps ``default`` (every env), ``atari`` (ALE ids) and env ids to settings;
        later entries override earlier ones and explicit arguments override them all.
        """
        return read_presets(cls.__module__.rsplit('.', 1)[0], env_id)

    @classmethod
    def run_settings_apart(cls, settings: dict) -> tuple[dict, dict]:
        """``settings`` split into the agent's own parameters (and env settings) and the run's: parameters of
        ``fit`` that the constructors do not take (``checkpoints``, ``quiet``, a preset's ``reward_buffer_size``)."""
        run = set(inspect.signature(BaseAgent.fit).parameters) - cls.parameter_names()
        return ({name: value for name, value in settings.items() if name not in run},
                {name: value for name, value in settings.items() if name in run})

    @classmethod
    def parameter_names(cls) -> set[str]:
        """Every parameter the agent's constructors (and the envs it is built on) take."""
        names = {name for klass in cls.__mro__ if '__init__' in vars(klass)
                 for name in inspect.signature(klass.__init__).parameters}
        return names - {'self', 'envs', 'kwargs'} | set(ENV_PARAMETERS)

    @classmethod
    def check_parameter_names(cls, kwargs: dict) -> None:
        """Refuse a parameter the agent does not take, naming the class and the closest name (a
        Stable-Baselines3 name's twin: ``learning_rate`` -> ``lr``), as the command line does for flags."""
        known = cls.parameter_names() - set(ENV_PARAMETERS)
        for name in kwargs:
            if name in ENV_PARAMETERS:
                raise TypeError(f'{cls.__name__} takes envs already made, and {name} is how envs are made: '
                                f"{cls.__name__}.from_env('CartPole-v1', {name}=...) or "
                                f'xagents.envs.creation.create_envs(..., {name}=...)')
            if name not in known:
                fit = {setting: f'fit({setting}=...)' for setting in inspect.signature(BaseAgent.fit).parameters}
                raise unknown_parameter(cls.__name__, name, known, fit)

    @classmethod
    def with_new_names(cls, kwargs: dict) -> dict:
        """``kwargs`` with parameters given by an old name (:data:`RENAMED`) under their new one, each
        with a one-line notice (when the agent or its ``fit`` has the new name and not the old; none for the
        Stable-Baselines3 names in :data:`KEPT`: ``buffer_size`` is ``buffer_max_size``)."""
        names, kwargs = cls.parameter_names() | set(inspect.signature(BaseAgent.fit).parameters), dict(kwargs)
        for old, new in RENAMED.items():
            if old in kwargs and old not in names and new in names:
                if new in kwargs:
                    raise ValueError(f'{old} is the old name of {new}: give one of them, not both')
                if old not in KEPT:
                    logger.warning('%s: %s is deprecated, use %s (the old name goes in the next release)',
                                   cls.__name__, old, new)
                kwargs[new] = kwargs.pop(old)
        return kwargs

    @classmethod
    def from_env(cls, env_id: str, **kwargs):
        """Build envs and the agent for ``env_id`` with the same tuned defaults as the CLI; run settings among
        ``kwargs`` (``quiet``, ``checkpoints``...: parameters of ``fit``) become fit's defaults for the agent."""
        kwargs = cls.with_new_names(kwargs)  # an explicit old name still wins over a tuned default
        presets = cls.default_hyperparameters(env_id)
        unknown = sorted(set(presets) - cls.parameter_names() - set(inspect.signature(BaseAgent.fit).parameters))
        if unknown:
            raise ValueError(f'{cls.__name__}\'s hyperparameters.json sets {unknown[0]!r} for {env_id}, '
                             f'which is none of its parameters')
        settings, run_settings = cls.run_settings_apart({**presets, **kwargs})
        settings = capped_initial_size(cls, settings, kwargs)  # a preset's initial size below the user's capacity
        env_kwargs = {name: settings.pop(name) for name in ENV_PARAMETERS if name in settings}
        n_envs = env_kwargs.get('n_envs', 1) * (settings.get('workers') or 1)
        if n_envs > 64:  # what the agent stores for many envs is judged on one env's spaces, before all are made
            probe = create_envs(env_id, **{**env_kwargs, 'n_envs': 1})
            try:
                cls.check_memory(probe.single_observation_space, n_envs, settings)
            finally:
                probe.close()
        envs = create_envs(env_id, seed=settings.get('seed'), **env_kwargs)
        try:
            agent = cls(envs, **settings)
        except BaseException:
            envs.close()
            raise
        agent.run_defaults.update(run_settings)
        agent.generic_env = None if names_env(cls.__module__.rsplit('.', 1)[0], env_id) else env_id
        return agent

    @classmethod
    def check_memory(cls, observation_space: gym.Space, n_envs: int, settings: dict) -> None:
        """Refuse ``settings`` whose storage for ``n_envs`` envs cannot fit in memory, before the envs are made (the
        families that store per env say how; the agent's construction checks again with the envs made)."""

    def model_file(self, role: str, observation_space: gym.Space, given, variant: str = '') -> str | keras.Model:
        """Resolve a model argument: a network of the user's (a Keras model or layer, a PyTorch or Flax module) or a
        cfg path as given, or the packaged default.

        The default is ``models/{ann,cnn}-<role><variant>.cfg`` (dense ones with ``dense_variant``, so SAC's are
        ``ann-actor-256.cfg``) beside the agent's module, else beside its
        base class's (TD3 uses DDPG's actor; PPO and A2C the shared ``xagents/agent/models``). A bare
        file name that is no file here names a packaged cfg the same way (a preset's
        ``"actor_model": "ann-actor-256.cfg"``). With ``simba`` the packaged SimBa network replaces both (a
        network of the user's is refused: simba would drop it).
        """
        packaged = given is None or (isinstance(given, str) and os.path.basename(given) == given
                                     and given.endswith('.cfg') and not os.path.exists(given))
        if self.network_variant:
            if not packaged:
                raise ValueError(f'{type(self).__name__}: simba builds the {role} network, and one of yours is given '
                                 f'too ({given!r}): give one of them')
            given, variant = None, self.network_variant + variant
        elif not packaged:
            return given
        if is_image_space(observation_space):
            name = given or f'cnn-{role}{variant}.cfg'
        else:
            name = given or f'ann-{role}{variant}{"" if self.network_variant else self.dense_variant}.cfg'
        for klass in type(self).__mro__:
            if issubclass(klass, BaseAgent):
                root, *inner = klass.__module__.split('.')[:-1]
                path = importlib.resources.files(root).joinpath(*inner, 'models', name)
                if path.is_file():
                    return str(path)
        if self.network_variant and variant.endswith('-recurrent'):
            raise ValueError(f'{type(self).__name__} has no recurrent SimBa {role} network (no packaged {name}): leave '
                             'simba or recurrent off, or give a .cfg with [residual-N] and [recurrent-N] sections')
        if self.network_variant:
            raise ValueError(f'{type(self).__name__} has no SimBa {role} network for these observations (no packaged '
                             f'{name}): leave simba off, or give a .cfg with [residual-N] sections')
        raise ValueError(f'{type(self).__name__} ships no {name}: pass a model (a .cfg file or a Keras model)')

    def build(self, role: str, given, outputs: Sequence[Output], features: bool = False,
              recurrent: str | None = None, packaged: str | None = None) -> keras.Model:
        """Build (or accept, as a Keras model: see :mod:`xagents.networks.own`) the model for ``role`` with the
        outputs the agent needs (and, with ``features``,
        the activations its first output's layer takes, last; with ``recurrent``, its memory: the packaged
        default is then ``{ann,cnn}-<role>-recurrent.cfg``). ``packaged`` names the packaged default's role where
        it is not ``role`` (DQN's dueling network)."""
        observation_space = self.envs.single_observation_space
        model = self.model_file(packaged or role, observation_space, given, '-recurrent' if recurrent else '')
        if not isinstance(model, str):
            if recurrent:
                raise ValueError(f"{type(self).__name__}'s {role}: recurrent={recurrent!r} builds its memory from a "
                                 '.cfg model (a [recurrent-N] section), got a network of yours')
            model = self.own_network(role, model, observation_space, outputs, features)
        else:
            model = build_model(model, observation_space, outputs, name=role, features=features, recurrent=recurrent,
                                precision=self.precision, batch_renorm=self.batch_renorm)
        self.models[role] = model
        return model

    def own_network(self, role: str, network, observation_space: gym.Space, outputs: Sequence[Output],
                    features: bool = False) -> keras.Model:
        """A network of the user's (a Keras model or layer, a PyTorch or Flax module) as a Keras model of
        ``observation_space``, checked: refused on Dict observations (models there take the packed vector a .cfg
        model splits), in float32 under ``precision='bf16'``, or with other inputs or outputs than ``outputs``."""
        owner = f"{type(self).__name__}'s {role}"
        if self.dict_observations is not None:
            raise ValueError(f"{owner}: Dict observations need a .cfg model (each key's layers given with "
                             'input=KEY), got a network of yours')
        model = own.as_keras_model(network, observation_space, role, owner)
        check_precision(model, self.precision, owner)
        check_model(model, observation_space, outputs, features, owner)
        return model

    def make_optimizer(self, role: str, optimizer: keras.optimizers.Optimizer | None = None,
                       **overrides) -> keras.optimizers.Optimizer:
        """Register the optimizer of ``role``'s model (default: Adam with ``optimizer_settings``, AdamW for SimBa),
        built so that it can be restored and traced, and following the shared LR schedule."""
        optimizer = optimizer or residual.default_optimizer(self, role, overrides)
        optimizer.build(self.models[role].trainable_variables)
        self.optimizers[role] = optimizer
        self.initial_learning_rates[role] = float(optimizer.learning_rate)
        return optimizer

    def update_learning_rates(self) -> None:
        """Set each optimizer's rate: initial x plateau reductions x linear decay (if any)."""
        decay = 1.0 if self.lr_decay_steps is None else max(0.0, 1 - self.steps / self.lr_decay_steps)
        for role, optimizer in self.optimizers.items():
            optimizer.learning_rate.assign(self.initial_learning_rates[role] * self.lr_factor * decay)

    # ---------------------------------------------------------------- files (agent.persistence)
    def identity(self) -> dict[str, str | None]:
        """What this agent's files were made by: the agent, the env id (if known) and its spaces."""
        return persistence.identity_of(type(self).__name__, self.envs)

    def save_models(self, paths: Sequence[str] | None = None) -> None:
        """Save every model (with its optimizer, the step counter and the run's identity) to ``paths``, one per
        model role (what ``fit(checkpoints=...)`` writes); default: the checkpoints of the agent's fits."""
        paths = paths or self.run_defaults.get('checkpoints')
        if not paths:
            raise ValueError(f'expected checkpoint paths, one per model ({", ".join(self.model_roles)}), got none')
        persistence.save_models(self, paths)

    def model_checkpoints(self, paths: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        """What :meth:`save_models` writes to each of ``paths``, copied now (for ``write_checkpoint`` later)."""
        return persistence.model_checkpoints(self, paths)

    def load_weights(self, weights: Sequence[str]) -> None:
        """Load models (and optimizer states) saved by :meth:`save_models`, one path per role.

        Args:
            weights: Weights files saved by --checkpoints, one per model, or a directory written by
                save (a save_dir: its latest save): to resume training (with its history) or to play.

        Raises:
            ValueError: a file is no checkpoint, was saved by another agent, env or spaces, does not fit
                its model, or the files are from different steps (a set torn by a kill while saving).
        """
        persistence.load_weights(self, weights)

    @staticmethod
    def trained_normalisation(weights: Sequence[str]) -> dict[str, bool]:
        """The normalisation flags the weights files were trained with (play and export need the same)."""
        return persistence.trained_normalisation(weights)

    @validated
    def save(self, path: str, include_buffer: bool = False) -> str:
        """Write the agent to directory ``path``: every model with its optimizer state, the
        hyperparameters it was built with, its env, step counter, identity, normalisation statistics
        and random state, and (``include_buffer``) its replay buffer. ``load`` rebuilds it from that
        alone. A kill while saving leaves the previous save of ``path`` whole (see ``xagents.storage.saved``).

        Returns:
            ``path``.
        """
        return persistence.save(self, path, include_buffer)

    @classmethod
    def load(cls, path: str, env: str | gym.Env | gym.vector.VectorEnv | None = None, **overrides):
        """Rebuild an agent saved by :meth:`save`: on the env it was trained on (made again from its id
        and settings), or on ``env`` (an id, a ``gym.Env`` or a vector env) with the same spaces.

        Args:
            path: A directory written by ``save``, or a ``save_dir`` of ``fit`` (its latest ``step-N`` save).
            env: Where the agent acts from now on (default: as it was saved).
            overrides: Constructor arguments that replace the saved ones, any that could not be saved (a
                Keras model object given as ``model``), and run settings for its fits (``quiet=True``).

        Raises:
            ValueError: ``path`` holds another agent, was trained on another env or spaces, or was
                written by a newer xagents.
        """
        return persistence.load(cls, path, env, **overrides)

    def restore(self, path: str, manifest: dict | None = None) -> None:
        """Take back the models, statistics, step counter, random state (and replay buffer) of a
        directory written by :meth:`save` into this agent."""
        persistence.restore(self, path, manifest)

    # ------------------------------------------------------------------------ normalisation
    def running_statistics(self) -> dict[str, RunningMeanStd]:
        """The normalisation statistics the agent learns with, by name; saved with its first model."""
        return {} if self.observation_stats is None else {'observation': self.observation_stats}

    def training_state(self) -> dict:
        """What changes while training besides weights and statistics, JSON-ready: random states and
        counters that decide the next update (saved by :meth:`save`)."""
        return {'random_state': self.rng.bit_generator.state,
                'graph_random': keras.ops.convert_to_numpy(self.graph_random.state).tolist()}

    def restore_training_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state['random_state']
        if 'graph_random' in state:
            self.graph_random.state.assign(np.asarray(state['graph_random'], 'int64'))

    def graph_variables(self) -> list:
        """The Keras variables compiled updates read or assign (see :mod:`xagents.backend`): every model's and
        optimizer's, and the graph random stream's state."""
        return ([variable for model in self.models.values() for variable in model.variables]
                + [variable for optimizer in self.optimizers.values() for variable in optimizer.variables]
                + [self.graph_random.state])

    def acting(self, *models: keras.Model) -> Forward:
        """The forward pass the agent acts with (see :class:`xagents.networks.models.Forward`), kept in
        step with the weights by :meth:`on_weights_changed`."""
        forward = Forward(*models)
        self.forwards.append(forward)
        return forward

    def on_weights_changed(self) -> None:
        """Called after weights change outside ``train_step`` (loading, updates): refresh acting passes."""
        for forward in self.forwards:
            forward.refresh()
        self._weights_version += 1

    def new_memory(self, batch: int) -> Memory | None:
        """The recurrent state of ``batch`` envs about to begin episodes, for :meth:`act` (None: the policy has no
        memory)."""
        return None

    def collect(self):
        """Act in the envs for one round; what the agent learns from (workers return it to the learner)."""
        raise NotImplementedError

    def start_collection(self) -> None:
        """A collection begins (with the weights of the last update): gSDE draws its noise anew."""
        if self.sde:
            self.sde.reset()

    # ---------------------------------------------------------------------------- training
    def act(self, observations: np.ndarray, deterministic: bool = False,
            action_masks: np.ndarray | None = None) -> np.ndarray:
        """Actions for a batch of observations, as the env expects them (see :meth:`env_actions`), among the
        actions ``action_masks`` ``(B, n)`` allows (agents that mask, ``masks_actions``)."""
        raise NotImplementedError

    @validated
    def predict(self, observation: np.ndarray | dict, deterministic: bool = True,
                action_mask: np.ndarray | None = None, state: np.ndarray | None = None,
                episode_start: npt.ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """``(actions, state)``: env-ready actions for one observation or a batch of them, and the policy's memory.

        As Stable-Baselines3's ``predict`` (``action, _ = agent.predict(obs)``): actions batched as the observations
        are, with the observation normalisation and action scaling of training (nothing learns); ``state`` is None
        for a policy without memory. Envs with Discrete states (FrozenLake) may give their state indices, one-hot
        encoded here as in training; Dict observations come as a dict of arrays, every key one observation or every
        key a batch. ``action_mask`` (``(n,)`` for one observation, ``(batch, n)`` for a batch; booleans or 0/1, as
        ``info['action_mask']`` or ``env.action_masks()`` give it) keeps the actions to the allowed ones.

        A recurrent policy (``recurrent='lstm'``) returns its memory as ``state``: give it back with the next
        observation, and ``episode_start`` (True, or ``(batch,)`` booleans) where an episode begins; without a
        ``state`` every episode begins now. Its state is ``(S,)`` floats for one observation, ``(batch, S)`` for a
        batch.

        Raises:
            ValueError: the observation has neither the env's observation shape nor a batch of it, or the
                mask does not fit it or the action space, or the agent does not take masks, or a state is given
                to a policy without memory or does not fit its memory.
        """
        observations, single = self.observation_batch(observation)
        masks = None if action_mask is None else self.checked_masks(action_mask, len(observations))
        memory = given_memory(self.new_memory(len(observations)), state, episode_start, single, type(self).__name__)
        actions = self.act(observations, deterministic, **mask_kwargs(masks), **memory_kwargs(memory))
        if memory is None:
            return (actions[0] if single else actions), None
        return (actions[0], memory.next_state[0]) if single else (actions, memory.next_state)

    def policy_graph(self, observations, action_masks=None, memory: tuple | None = None):
        """Deterministic env-ready actions for a batch of raw observations (a dict of tensors for Dict
        observations; among the actions ``action_masks`` allows), in ``keras.ops`` only (what :meth:`export`
        writes): Dict packing, observation normalisation, the policy's mode, action scaling. A recurrent policy
        takes ``memory = (episode_starts (B,), states (B, S))`` and returns ``(actions, states)``."""
        observations = self.normalized_graph(self.encoded_graph(observations))
        if memory is None:
            return self.env_actions_graph(self.greedy_graph(observations, **mask_kwargs(action_masks)))
        actions, states = self.greedy_graph(observations, **mask_kwargs(action_masks), memory=memory)
        return self.env_actions_graph(actions), states

    def greedy_graph(self, observations):
        """The policy's deterministic actions (inside the agent: indices, or ``[-1, 1]`` / raw Box
        actions) for normalised observations, in graph ops."""
        raise NotImplementedError

    def env_actions_graph(self, actions):
        """:meth:`env_actions` in graph ops."""
        space = self.envs.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            return ops.cast(actions, 'int64') + int(space.start)
        if isinstance(space, gym.spaces.MultiDiscrete):
            start = ops.convert_to_tensor(space.start.ravel().astype(np.int64))  # (a tensor: see normalized_graph)
            return ops.reshape(ops.cast(actions, 'int64') + start, (-1, *space.shape))
        if isinstance(space, gym.spaces.MultiBinary):
            return ops.reshape(ops.cast(actions, 'int64'), (-1, *space.shape))
        return actions

    @validated
    def export(self, path: str, format: str | None = None, action_mask: bool = False) -> str:
        """Write the deterministic policy as a standalone model at ``path``: raw observations in,
        env-ready actions out, normalisation and action scaling inside.

        Args:
            path: File (tflite, onnx) or directory (saved_model) to write; it must not exist.
            format: saved_model, tflite or onnx (the last two need pip install 'xagents[export]');
                default: from the path, onnx for .onnx, tflite for .tflite, else saved_model.
            action_mask: The export takes a second input, action_mask: (batch, n) booleans of the allowed
                actions (Discrete actions of PPO, A2C, TRPO, DQN and SAC; MultiDiscrete of PPO, A2C, TRPO).

        On PyTorch, ONNX is written in this process by PyTorch's exporter. Otherwise, on a backend other than
        TensorFlow, a TensorFlow process loads a save of the agent and exports it (the agent must be one :meth:`load`
        can rebuild: made from an env id, with networks from .cfg files).

        Returns:
            ``path``.
        """
        from xagents.storage.export import export_policy, format_of

        if backend.NAME != 'tensorflow' and not (backend.NAME == 'torch' and format_of(path, format) == 'onnx'):
            return persistence.export_through_tensorflow(self, path, format, action_mask)

        size = mask_size(self.envs.single_action_space) if action_mask else None
        if action_mask:
            self.checked_masks(np.ones((1, size or 0), bool), 1)  # refuses agents and spaces without masks
        memory = self.new_memory(1)
        with computing_in_float32(list(self.models.values())):  # a bf16 agent exports a float32 policy
            return export_policy(self.policy_graph, self.envs.single_observation_space, path, format, size,
                                 None if memory is None else memory.state.shape[1], list(self.models.values()))

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """The agent's actions as the env takes them; the one place they are converted.

        Discrete actions are indices from 0 inside every agent and shifted by the space's
        ``start`` here; MultiDiscrete and MultiBinary ones are flat ``(B, k)`` choices from 0, shifted by
        ``start`` and shaped as the space here; subclasses convert Box actions (clipped or scaled to the bounds).
        """
        space = self.envs.single_action_space
        if isinstance(space, gym.spaces.Discrete) and space.start:
            return actions + space.start
        if isinstance(space, gym.spaces.MultiDiscrete):
            return (actions + space.start.ravel()).reshape((len(actions), *space.shape)).astype(space.dtype)
        if isinstance(space, gym.spaces.MultiBinary):
            return actions.reshape((len(actions), *space.shape)).astype(space.dtype)
        return actions

    def train_once(self) -> dict[str, float]:
        """Interact with the envs and update once; return loss metrics."""
        raise NotImplementedError

    @with_run_defaults
    @validated
    def fit(
        self,
        *,
        target_reward: float | None = None,
        max_steps: int | None = None,
        monitor_session: str | None = None,
        tensorboard: str | None = None,
        eval_frequency: int | None = None,
        eval_episodes: int = 5,
        stop_on: str = 'train',
        callbacks: Sequence[Callback] = (),
        total: bool = False,
        save_dir: str | None = None,
        save_frequency: int | None = None,
        save_keep: int = 3,
        save_replay_buffer: bool = False,
        checkpoints: Sequence[str] | None = None,
        history_checkpoint: str | None = None,
        reward_buffer_size: int = 100,
        log_frequency: int = 10,
        plateau_start_steps: int | None = None,
        plateau_reduce_factor: float = 0.9,
        plateau_reduce_patience: int = 10,
        early_stop_patience: int = 3,
        ray_address: str | None = None,
        quiet: bool = False,
    ) -> Run:
        """Train until the mean reward reaches ``target_reward`` or ``max_steps`` env steps pass.

        Every setting is a keyword: ``fit(max_steps=N)`` is Stable-Baselines3's ``learn(total_timesteps=N)``.
        Settings not given take the agent's run defaults (``from_env``'s presets and arguments), else those below;
        the work is :func:`xagents.training.fit.train`'s.

        Args:
            target_reward: Stop when the mean of the last ``reward_buffer_size`` episodes reaches it.
            max_steps: Stop after this many env steps (summed over envs).
            monitor_session: Log metrics to a wandb run of this name.
            tensorboard: Write TensorBoard summaries to this directory.
            eval_frequency: Every this many steps, play eval_episodes deterministic episodes.
            eval_episodes: Episodes per deterministic evaluation, each in its own env.
            stop_on: Judge target_reward on the 'train' mean reward or the latest 'eval' reward.
            callbacks: More :class:`xagents.training.callbacks.Callback` s, after the built-in ones (one is
                taken alone too); anything else, a Stable-Baselines3 callback included, is refused.
            total: Count max_steps over all the agent's steps (earlier fits, a resumed history), not
                only this call's (Stable-Baselines3's reset_num_timesteps=False).
            save_dir: Save the whole agent (loadable by load, --weights) into this directory as step-N: every
                save_frequency steps and when training ends (not after an error); the best-evaluated one as
                best-eval.
            save_frequency: Steps between saves into save_dir (none: only when training ends).
            save_keep: Saves kept in save_dir as step-N (the oldest go; never the one just written).
            save_replay_buffer: Saves into save_dir include the replay buffer (off-policy agents, ACER),
                so a run resumed from one learns at once.
            checkpoints: Paths to save the best models to, one per model role (with their optimizers); written
                with the history at most every 2 seconds and at the end.
            history_checkpoint: Parquet file recording every finished episode.
            reward_buffer_size: Episodes averaged into the mean reward (target_reward, the best model).
            log_frequency: Log a progress line every this many finished episodes.
            plateau_start_steps: Steps after which plateau and early-stop monitoring start.
            plateau_reduce_factor: Multiply the learning rate by this on a plateau.
            plateau_reduce_patience: Progress lines without a new best mean before reducing the lr.
            early_stop_patience: Learning-rate reductions without improvement before stopping.
            ray_address: Run the agent's workers on the Ray cluster at this address (the one ray start
                --head prints) instead of a local Ray instance started for this fit.
            quiet: Log nothing.

        Returns:
            The run: its mean, best and evaluation rewards, why it stopped, and the history.
        """
        settings = SimpleNamespace(**{name: value for name, value in locals().items() if name != 'self'})
        settings.callbacks = checked_callbacks(callbacks)  # before anything is made
        return train(self, settings)

    def config(self) -> dict:
        """Hyperparameters worth recording with a run."""
        return {key: value for key, value in vars(self).items()
                if isinstance(value, (int, float, str, bool)) and not key.startswith('_')}

    @validated
    def evaluate(self, episodes: int = 10, env: str | gym.Env | gym.vector.VectorEnv | None = None,
                 deterministic: bool = True, seed: int | None = None,
                 max_episode_steps: int | None = None) -> EvaluationResult:
        """Play ``episodes`` whole episodes; their returns and lengths (see :func:`xagents.evaluate`)."""
        return evaluate(self, env, episodes, deterministic, seed, max_episode_steps)

    # ------------------------------------------------------------------------------- play
    @validated
    def play(
        self,
        env_id: str | None = None,
        video_dir: str | None = None,
        frame_dir: str | None = None,
        frame_frequency: int = 1,
        max_steps: int | None = None,
        render: bool = False,
        seed: int | None = None,
        episodes: int = 1,
    ) -> EvaluationResult:
        """Play whole games with deterministic actions; optionally show, film or photograph them.

        Args:
            env_id: Environment to play (default: the agent's), made as the agent's envs were.
            video_dir: Write an mp4 of each game to this directory.
            frame_dir: Write jpg frames to this directory.
            frame_frequency: Write every this many steps' frame.
            max_steps: Stop each game after this many steps.
            render: Show the games on screen.
            seed: Seed of the first reset (default 0): the same command plays the same games.
            episodes: Number of games, played one after another on one env.

        Returns:
            Each game's score and length.
        """
        from xagents.training.play import play_episodes

        games = play_episodes(self, env_id, video_dir, frame_dir, frame_frequency, max_steps, render,
                              0 if seed is None else seed, episodes)
        return EvaluationResult(*(np.asarray(column) for column in zip(*games)))


"""The shared agent machinery: ``fit`` (collect -> ``train_step`` -> the run's callbacks), env stepping,
checkpoints, evaluation and play; :class:`OnPolicy` and :class:`OffPolicy` collect for their families.

Agents subclass :class:`OnPolicy` or :class:`OffPolicy` and supply their update as ``train_step``.
What one ``fit`` call tracks (episode statistics, stop rules, progress, files written) lives in its
:class:`xagents.run.Run` and the callbacks of :mod:`xagents.callbacks`, not on the agent.
"""
from __future__ import annotations

import functools
import importlib.resources
import inspect
import logging
import os
import time
from typing import Sequence

import gymnasium as gym
import numpy as np
from xagents.utils.quiet_tensorflow import tf
from gymnasium.wrappers.utils import RunningMeanStd

from xagents.utils.buffers import (PrioritizedReplayBuffer, ReplayBuffer, Rollout, RolloutBuffer, buffer_state,
                                   restore_buffer_state)
from xagents.callbacks import (Callback, Checkpoints, Evaluation, Plateau, ProgressBar, ProgressLines, Saves,
                               TensorBoard, Wandb)
from xagents.distributed import Segment, WorkerPool, join
from xagents.evaluation import EvaluationResult, evaluate
from xagents.run import Episode, Run
from xagents.utils.atomic import atomic_write, check_writable, remove_stale_temporaries
from xagents.utils.checkpoints import read_checkpoint, save_checkpoint
from xagents.utils.console import console_logging
from xagents.utils.distributions import DiagGaussian, StateDependentNoise, distribution_for
from xagents.utils.envs import (ENV_PARAMETERS, EpisodeScores, as_vector_env, create_envs, env_settings, frame_stacked,
                                one_hot_size)
from xagents.utils.history import History, check_identity
from xagents.utils.memory import check_fits
from xagents.utils.models import Forward, NumpyForward, Output, build_model
from xagents.utils.presets import read_presets
from xagents.utils.returns import gae
from xagents.utils.saved import json_values, read_manifest, write_manifest
from xagents.utils.validation import RENAMED, validated

logger = logging.getLogger('xagents')
# The running statistics a checkpoint can hold, and the constructor flag that makes an agent keep them.
NORMALISATION_FLAGS = {'observation': 'normalize_observations', 'return': 'normalize_rewards'}
ACTING, REPLAY = 1, 2  # purposes of an agent's NumPy random streams (see random_stream)


def constructor(init):
    """Wrap an agent's ``__init__``: a parameter given by its old name (:data:`RENAMED`) is passed by its
    new one, with a one-line notice; a ``gym.Env`` or vector env of the user's is taken as agents take
    envs (:func:`as_vector_env`); and the outermost call records the arguments it was given as the
    agent's ``hyperparameters`` (what :meth:`BaseAgent.save` writes and ``load`` builds from)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def construct(self, envs, *args, **kwargs):
        kwargs = type(self).with_new_names(kwargs)
        envs = as_vector_env(envs)
        if 'hyperparameters' not in vars(self):
            given = signature.bind_partial(self, envs, *args, **kwargs).arguments
            given.update(given.pop('kwargs', {}))
            self.hyperparameters = {name: value for name, value in given.items() if name not in ('self', 'envs')}
        return init(self, envs, *args, **kwargs)

    return construct


class BaseAgent:
    """Base of every agent: hyperparameters, models, envs and the training loop that ``fit`` drives.

    Subclasses declare ``supported_action_spaces`` and ``model_roles`` (the models saved by
    ``--checkpoints``, in order), build their models and optimizers, and implement
    :meth:`train_once` (through :class:`OnPolicy` / :class:`OffPolicy`) and :meth:`act`.
    """

    supported_action_spaces: tuple[type[gym.Space], ...] = (gym.spaces.Discrete, gym.spaces.Box)
    model_roles: tuple[str, ...] = ('model',)
    observation_clip = 10.0  # normalised observations are clipped to +-this (VecNormalize's clip_obs)

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
        reward_buffer_size: int = 100,
        checkpoints: Sequence[str] | None = None,
        history_checkpoint: str | None = None,
        log_frequency: int = 10,
        plateau_start_steps: int | None = None,
        plateau_reduce_factor: float = 0.9,
        plateau_reduce_patience: int = 10,
        early_stop_patience: int = 3,
        normalize_observations: bool = False,
        workers: int | None = None,
        ray_address: str | None = None,
        quiet: bool = False,
    ) -> None:
        """Check the env against the agent and set up the shared machinery.

        Args:
            envs: A Gymnasium vector env (see ``xagents.utils.envs.create_envs``).
            lr: Learning rate.
            lr_decay_steps: Anneal learning rates linearly to 0 over this many steps (RL Zoo's schedule).
            gamma: Discount factor.
            seed: Seed for TensorFlow, NumPy action sampling and the envs; same seed, same history.
            reward_buffer_size: Episodes averaged into the mean reward judged by target_reward.
            checkpoints: Paths to save the best models to, one per model role.
            history_checkpoint: Parquet file recording every finished episode.
            log_frequency: Log a progress line every this many finished episodes.
            plateau_start_steps: Steps after which plateau and early-stop monitoring start.
            plateau_reduce_factor: Multiply the learning rate by this on a plateau.
            plateau_reduce_patience: Progress lines without a new best mean before reducing the lr.
            early_stop_patience: Learning-rate reductions without improvement before stopping.
            normalize_observations: Scale vector observations by their running mean and standard
                deviation, clipped (Baselines' VecNormalize and DDPG, RL Zoo's normalize); the statistics
                are updated while collecting only, frozen when acting outside training, and saved with
                the first model.
            workers: Collect experience on this many Ray workers, each with n_envs envs (pip install
                'xagents[distributed]'); the agent learns from workers x n_envs envs.
            ray_address: Join the Ray cluster at this address (the one ray start --head prints) instead of
                starting a local Ray instance for each fit.
            quiet: Log nothing.
        """
        if not isinstance(envs.single_observation_space, gym.spaces.Box):
            raise ValueError(
                f'{type(self).__name__} expects Box observations (envs made by create_envs one-hot encode '
                f'Discrete ones), got {envs.single_observation_space}'
            )
        if not isinstance(envs.single_action_space, self.supported_action_spaces):
            supported = ', '.join(space.__name__ for space in self.supported_action_spaces)
            raise ValueError(
                f'{type(self).__name__} supports {supported} action spaces, '
                f'got {envs.single_action_space}'
            )
        if checkpoints is not None and len(checkpoints) != len(self.model_roles):
            raise ValueError(
                f'{type(self).__name__} trains {len(self.model_roles)} model(s) '
                f'({", ".join(self.model_roles)}), got {len(checkpoints)} checkpoint path(s)'
            )
        outputs = [os.path.realpath(path) for path in [*(checkpoints or ()), history_checkpoint] if path]
        for path in [*(checkpoints or ()), history_checkpoint]:
            if path and outputs.count(os.path.realpath(path)) > 1:
                raise ValueError(f'expected a path of its own for each checkpoint and the history, got {path} twice')
        if ray_address and not workers:
            raise ValueError('ray_address is where workers run: give workers too')
        self.envs = envs
        self.workers, self.ray_address = workers, ray_address
        self.n_envs = envs.num_envs * (workers or 1)  # the envs the agent learns from: workers x n_envs
        self.pool: WorkerPool | None = None  # the workers of the fit in progress
        self.gamma = gamma
        self.seed = seed
        self.checkpoints = list(checkpoints) if checkpoints else None
        self.history_checkpoint = history_checkpoint
        self.reward_buffer_size, self.log_frequency = reward_buffer_size, log_frequency
        self.plateau_start_steps = plateau_start_steps
        self.plateau_reduce_factor = plateau_reduce_factor
        self.plateau_reduce_patience = plateau_reduce_patience
        self.early_stop_patience = early_stop_patience
        self.quiet = quiet
        self.observation_stats = None
        if normalize_observations:
            shape = envs.single_observation_space.shape
            if len(shape) != 1:
                raise ValueError(f'normalize_observations expected vector observations, got shape {shape}')
            self.observation_stats = RunningMeanStd(shape=shape)
        if not quiet:
            console_logging()
        if seed is not None:
            tf.keras.utils.set_random_seed(seed)
        self.rng = random_stream(seed, ACTING)
        self.optimizer_settings = {'learning_rate': lr}  # Adam's, for make_optimizer's default
        self.lr_decay_steps = lr_decay_steps
        self.lr_factor = 1.0  # product of plateau reductions
        self.initial_learning_rates: dict[str, float] = {}
        self.history = History(history_checkpoint, self.identity())  # every finished episode, across runs
        self.models: dict[str, tf.keras.Model] = {}
        self.optimizers: dict[str, tf.keras.optimizers.Optimizer] = {}
        self.steps = 0  # env steps taken, over all runs: the clock of every schedule
        self.weights_loaded: list[str] = []
        self.written_save_dirs: set[str] = set()  # save_dirs of earlier fits (real paths): later fits go on there
        self.training_started = False  # envs reset and stepped by a run
        self.forwards: list[Forward] = []  # acting passes, refreshed when weights change
        self._weights_version = 0  # counts weight changes: workers get new weights when it moves
        self.finished_episodes: list[Episode] = []  # since the run last took them

    # ----------------------------------------------------------------- construction helpers
    @classmethod
    def default_hyperparameters(cls, env_id: str) -> dict:
        """Tuned defaults for ``env_id`` from the agent's ``hyperparameters.json``.

        The file maps ``default`` (every env), ``atari`` (ALE ids) and env ids to settings;
        later entries override earlier ones and explicit arguments override them all.
        """
        return read_presets(cls.__module__.rsplit('.', 1)[0], env_id)

    @classmethod
    def parameter_names(cls) -> set[str]:
        """Every parameter the agent's constructors (and the envs it is built on) take."""
        names = {name for klass in cls.__mro__ if '__init__' in vars(klass)
                 for name in inspect.signature(klass.__init__).parameters}
        return names - {'self', 'envs', 'kwargs'} | set(ENV_PARAMETERS)

    @classmethod
    def with_new_names(cls, kwargs: dict) -> dict:
        """``kwargs`` with parameters given by an old name (:data:`RENAMED`) under their new one, each
        with a one-line notice (when the agent has the new name and not the old)."""
        names, kwargs = cls.parameter_names(), dict(kwargs)
        for old, new in RENAMED.items():
            if old in kwargs and old not in names and new in names:
                if new in kwargs:
                    raise ValueError(f'{old} is the old name of {new}: give one of them, not both')
                logger.warning('%s: %s is deprecated, use %s (the old name goes in the next release)',
                               cls.__name__, old, new)
                kwargs[new] = kwargs.pop(old)
        return kwargs

    @classmethod
    def from_env(cls, env_id: str, **kwargs):
        """Build envs and the agent for ``env_id`` with the same tuned defaults as the CLI."""
        kwargs = cls.with_new_names(kwargs)  # an explicit old name still wins over a tuned default
        presets = cls.default_hyperparameters(env_id)
        unknown = sorted(set(presets) - cls.parameter_names())
        if unknown:
            raise ValueError(f'{cls.__name__}\'s hyperparameters.json sets {unknown[0]!r} for {env_id}, '
                             f'which is none of its parameters')
        settings = {**presets, **kwargs}
        env_kwargs = {name: settings.pop(name) for name in ENV_PARAMETERS if name in settings}
        envs = create_envs(env_id, seed=settings.get('seed'), **env_kwargs)
        try:
            return cls(envs, **settings)
        except BaseException:
            envs.close()
            raise

    def model_file(self, role: str, observation_space: gym.Space, given) -> str | tf.keras.Model:
        """Resolve a model argument: a Keras model or cfg path as given, or the packaged default.

        The default is ``models/{ann,cnn}-<role>.cfg`` beside the agent's module, else beside its
        base class's (TD3 uses DDPG's actor; PPO and A2C the on-policy ``xagents/models``). A bare
        file name that is no file here names a packaged cfg the same way (a preset's
        ``"actor_model": "ann-actor-256.cfg"``).
        """
        if given is not None and not (isinstance(given, str) and os.path.basename(given) == given
                                      and given.endswith('.cfg') and not os.path.exists(given)):
            return given
        name = given or f'{"cnn" if len(observation_space.shape) == 3 else "ann"}-{role}.cfg'
        for klass in type(self).__mro__:
            if issubclass(klass, BaseAgent):
                root, *inner = klass.__module__.split('.')[:-1]
                path = importlib.resources.files(root).joinpath(*inner, 'models', name)
                if path.is_file():
                    return str(path)
        raise ValueError(f'{type(self).__name__} ships no {name}: pass a model (a .cfg file or a Keras model)')

    def build(self, role: str, given, outputs: Sequence[Output], features: bool = False) -> tf.keras.Model:
        """Build (or accept) the model for ``role`` with the outputs the agent needs (and, with ``features``,
        the activations its first output's layer takes, last)."""
        observation_space = self.envs.single_observation_space
        model = self.model_file(role, observation_space, given)
        if not isinstance(model, tf.keras.Model):
            model = build_model(model, observation_space, outputs, name=role, features=features)
        self.models[role] = model
        return model

    def make_optimizer(self, role: str, optimizer: tf.keras.optimizers.Optimizer | None = None,
                       **overrides) -> tf.keras.optimizers.Optimizer:
        """Register the optimizer of ``role``'s model (default: Adam with ``optimizer_settings``),
        built so that it can be restored and traced, and following the shared LR schedule."""
        optimizer = optimizer or tf.keras.optimizers.Adam(**{**self.optimizer_settings, **overrides})
        optimizer.build(self.models[role].trainable_variables)
        self.optimizers[role] = optimizer
        self.initial_learning_rates[role] = float(optimizer.learning_rate)
        return optimizer

    def update_learning_rates(self) -> None:
        """Set each optimizer's rate: initial x plateau reductions x linear decay (if any)."""
        decay = 1.0 if self.lr_decay_steps is None else max(0.0, 1 - self.steps / self.lr_decay_steps)
        for role, optimizer in self.optimizers.items():
            optimizer.learning_rate.assign(self.initial_learning_rates[role] * self.lr_factor * decay)

    # ------------------------------------------------------------------------- checkpoints
    def identity(self) -> dict[str, str | None]:
        """What this agent's files were made by: the agent, the env id (if known) and its spaces."""
        return identity_of(type(self).__name__, self.envs)

    def save_models(self) -> None:
        """Save every model (with its optimizer, the step counter and the run's identity) to ``checkpoints``."""
        for role, path in zip(self.model_roles, self.checkpoints or ()):
            save_checkpoint(path, self.models[role], self.optimizers.get(role),
                            extras=self.checkpoint_extras(role), identity=self.identity(), steps=self.steps)

    def running_statistics(self) -> dict[str, RunningMeanStd]:
        """The normalisation statistics the agent learns with, by name; saved with its first model."""
        return {} if self.observation_stats is None else {'observation': self.observation_stats}

    def normalized(self, observations: np.ndarray) -> np.ndarray:
        """Observations as the models see them: scaled by the running statistics (frozen) when enabled."""
        stats = self.observation_stats
        if stats is None:
            return observations
        scaled = (observations - stats.mean) / np.sqrt(stats.var + 1e-8)
        return np.clip(scaled, -self.observation_clip, self.observation_clip).astype(np.float32)

    def observe(self, observations: np.ndarray) -> np.ndarray:
        """Observations met while collecting: the running statistics take them in, then they are normalised."""
        if self.observation_stats is not None:
            self.observation_stats.update(observations)
        return self.normalized(observations)

    def checkpoint_extras(self, role: str) -> dict[str, np.ndarray]:
        """Arrays saved beside ``role``'s weights: the running statistics, with the first model."""
        if role != self.model_roles[0]:
            return {}
        return {f'{name}_{field}': np.asarray(getattr(stats, field))
                for name, stats in self.running_statistics().items() for field in ('mean', 'var', 'count')}

    def restore_extras(self, role: str, extras: dict[str, np.ndarray]) -> None:
        """Take back what :meth:`checkpoint_extras` saved for ``role``."""
        if role != self.model_roles[0]:
            return
        unexpected = sorted({key.rsplit('_', 1)[0] for key in extras} - set(self.running_statistics()))
        if unexpected:
            flag = NORMALISATION_FLAGS.get(unexpected[0], unexpected[0])
            raise ValueError(f'the {role} weights were trained with {unexpected[0]} normalisation: build the agent '
                             f'with {flag} (--{flag.replace("_", "-")})')
        for name, stats in self.running_statistics().items():
            if f'{name}_mean' not in extras:
                raise ValueError(f'expected {name} statistics in the {role} weights file (saved by a run that '
                                 'normalised them), found none')
            stats.mean, stats.var = extras[f'{name}_mean'], extras[f'{name}_var']
            stats.count = float(extras[f'{name}_count'])

    @staticmethod
    def trained_normalisation(weights: Sequence[str]) -> dict[str, bool]:
        """The normalisation flags the weights files were trained with, e.g. ``{'normalize_observations':
        True}``: playing or exporting them needs the same (a directory written by save records its own)."""
        if not weights or os.path.isdir(weights[0]):
            return {}
        names = {key.rsplit('_', 1)[0] for key in read_checkpoint(weights[0]).extras}
        return {flag: True for name, flag in NORMALISATION_FLAGS.items() if name in names}

    def load_weights(self, weights: Sequence[str]) -> None:
        """Load models (and optimizer states) saved by :meth:`save_models`, one path per role.

        Args:
            weights: Weights files saved by --checkpoints, one per model, or a directory written by
                save: to resume training (with its history) or to play.

        Raises:
            ValueError: a file is no checkpoint, was saved by another agent, env or spaces, does not fit
                its model, or the files are from different steps (a set torn by a kill while saving).
        """
        if len(weights) == 1 and os.path.isdir(weights[0]):  # a directory written by save
            self.restore(weights[0])
            return
        checkpoints = [read_checkpoint(path) for path in weights]
        for checkpoint in checkpoints:  # another agent's weights are named as such, before their count
            check_identity(checkpoint.path, checkpoint.identity, self.identity())
        if len(weights) != len(self.model_roles):
            raise ValueError(
                f'{type(self).__name__} has {len(self.model_roles)} model(s) '
                f'({", ".join(self.model_roles)}), got {len(weights)} weights file(s)'
            )
        steps = {checkpoint.path: checkpoint.steps for checkpoint in checkpoints}
        if len(set(steps.values())) > 1:
            listed = ', '.join(f'{path} at step {step}' for path, step in steps.items())
            raise ValueError(f'expected weights files saved together, got {listed} '
                             '(a set torn by a kill while saving)')
        for role, checkpoint in zip(self.model_roles, checkpoints):
            checkpoint.restore(self.models[role], self.optimizers.get(role))
            self.restore_extras(role, checkpoint.extras)
        self.weights_loaded = list(weights)
        self.on_weights_changed()

    # ------------------------------------------------------------------------ save and load
    def save(self, path: str, include_buffer: bool = False) -> str:
        """Write the agent to directory ``path``: every model with its optimizer state, the
        hyperparameters it was built with, its env, step counter, identity, normalisation statistics
        and random state, and (``include_buffer``) its replay buffer. ``load`` rebuilds it from that
        alone. A kill while saving leaves the previous save of ``path`` whole (see ``utils.saved``).

        Returns:
            ``path``.
        """
        check_writable(path, directory=True)
        os.makedirs(path, exist_ok=True)
        tag = f'{self.steps:012d}-{os.urandom(4).hex()}'
        files = {}
        for role in self.model_roles:
            files[role] = f'{role}-{tag}.npz'
            save_checkpoint(os.path.join(path, files[role]), self.models[role], self.optimizers.get(role),
                            extras=self.checkpoint_extras(role), identity=self.identity(), steps=self.steps)
        if include_buffer:
            files['buffer'] = f'buffer-{tag}.npz'
            self.save_buffer(os.path.join(path, files['buffer']))
        hyperparameters, unsaved = json_values({name: value for name, value in self.hyperparameters.items()
                                                if name not in ('checkpoints', 'history_checkpoint', 'quiet', 'ray_address')})
        settings = env_settings(self.envs)
        write_manifest(path, {
            'agent': type(self).__name__, 'identity': self.identity(), 'steps': self.steps, 'files': files,
            'hyperparameters': hyperparameters, 'unsaved': unsaved,
            'env': settings and {**settings, 'n_envs': self.envs.num_envs,
                                 'async_envs': isinstance(self.envs, gym.vector.AsyncVectorEnv)},
            'training_state': self.training_state(),
        })
        return path

    @classmethod
    def load(cls, path: str, env: str | gym.Env | gym.vector.VectorEnv | None = None, **overrides):
        """Rebuild an agent saved by :meth:`save`: on the env it was trained on (made again from its id
        and settings), or on ``env`` (an id, a ``gym.Env`` or a vector env) with the same spaces.

        Args:
            path: A directory written by ``save``.
            env: Where the agent acts from now on (default: as it was saved).
            overrides: Constructor arguments that replace the saved ones (``quiet=True``), and any
                that could not be saved (a Keras model object given as ``model``).

        Raises:
            ValueError: ``path`` holds another agent, was trained on another env or spaces, or was
                written by a newer xagents.
        """
        manifest = read_manifest(path)
        if manifest['agent'] != cls.__name__:
            raise ValueError(f'{path} holds a saved {manifest["agent"]}, not {cls.__name__}: load it as '
                             f'{manifest["agent"]} ({manifest["agent"]}.load, xagents ... {manifest["agent"].lower()})')
        missing = [name for name in manifest['unsaved'] if name not in overrides]
        if missing:
            raise ValueError(f'{path} could not save {", ".join(missing)} (not JSON): pass it to load')
        settings = {**manifest['hyperparameters'], **overrides}
        env_overrides = {name: settings.pop(name) for name in ENV_PARAMETERS if name in settings}
        if env is None or isinstance(env, str):
            made = dict(manifest['env'] or {})
            if not made and env is None:
                raise ValueError(f'{path} was trained on an env not made from an id: pass the env to load')
            made['env_id'] = env or made['env_id']
            envs = create_envs(**{**made, **env_overrides, 'seed': settings.get('seed')})
        else:
            envs = as_vector_env(env)
        try:
            check_identity(path, manifest['identity'], identity_of(cls.__name__, envs))  # before building
            agent = cls(envs, **settings)
            agent.restore(path, manifest)
        except BaseException:
            envs.close()
            raise
        return agent

    def restore(self, path: str, manifest: dict | None = None) -> None:
        """Take back the models, statistics, step counter, random state (and replay buffer) of a
        directory written by :meth:`save` into this agent."""
        manifest = manifest or read_manifest(path)
        check_identity(path, manifest['identity'], self.identity())
        for role in self.model_roles:
            checkpoint = read_checkpoint(os.path.join(path, manifest['files'][role]))
            if checkpoint.steps != manifest['steps']:
                raise ValueError(f'{checkpoint.path} is from step {checkpoint.steps}, {path} from step '
                                 f'{manifest["steps"]}: a set torn while saving')
            checkpoint.restore(self.models[role], self.optimizers.get(role))
            self.restore_extras(role, checkpoint.extras)
        if 'buffer' in manifest['files']:
            self.load_buffer(os.path.join(path, manifest['files']['buffer']))
        self.steps = int(manifest['steps'])
        self.restore_training_state(manifest['training_state'])
        self.weights_loaded = [path]
        self.on_weights_changed()

    def save_buffer(self, path: str) -> None:
        """Write the replay buffer to ``path`` (agents that replay: off-policy agents and ACER)."""
        if not hasattr(self, 'buffer'):
            raise ValueError(f'{type(self).__name__} keeps no replay buffer to save')
        with atomic_write(path) as file:
            np.savez(file, **buffer_state(self.buffer))

    def load_buffer(self, path: str) -> None:
        """Take back a replay buffer written by :meth:`save_buffer`."""
        with np.load(path, allow_pickle=False) as archive:
            restore_buffer_state(self.buffer, dict(archive))

    def training_state(self) -> dict:
        """What changes while training besides weights and statistics, JSON-ready: random states and
        counters that decide the next update (saved by :meth:`save`)."""
        return {'random_state': self.rng.bit_generator.state}

    def restore_training_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state['random_state']

    def acting(self, *models: tf.keras.Model) -> Forward:
        """The forward pass the agent acts with (see :class:`xagents.utils.models.Forward`), kept in
        step with the weights by :meth:`on_weights_changed`."""
        forward = Forward(*models)
        self.forwards.append(forward)
        return forward

    def on_weights_changed(self) -> None:
        """Called after weights change outside ``train_step`` (loading, updates): refresh acting passes."""
        for forward in self.forwards:
            forward.refresh()
        self._weights_version += 1

    @property
    def weights_version(self) -> int:
        """A number that changes whenever the weights do."""
        return self._weights_version

    def worker_models(self) -> list[tf.keras.Model]:
        """The models whose weights workers receive: those the agent acts with."""
        return [model for forward in self.forwards for model in forward.models]

    def acting_weights(self) -> list[np.ndarray]:
        """The weights of :meth:`worker_models`, in order (what workers receive)."""
        return [weight for model in self.worker_models() for weight in model.get_weights()]

    def set_acting_weights(self, weights: list[np.ndarray]) -> None:
        """Take weights from :meth:`acting_weights` of an agent built alike."""
        offset = 0
        for model in self.worker_models():
            count = len(model.weights)
            model.set_weights(weights[offset:offset + count])
            offset += count
        self.on_weights_changed()

    # ------------------------------------------------------------------------ workers
    def worker_settings(self) -> dict:
        """Settings a worker's agent takes instead of the learner's: it acts and never trains."""
        return {}

    def become_worker(self, index: int, count: int, first_step: int = 0) -> None:
        """Turn this agent into worker ``index`` of ``count`` in a fit starting at the learner's ``first_step``:
        a random stream of its own (in a first fit, worker 0's is a local run's), changed in place so that what
        holds the generator (noise) follows."""
        if index or first_step:
            stream = random_stream(self.seed, ACTING, index, *([first_step] if first_step else []))
            self.rng.bit_generator.state = stream.bit_generator.state

    def gathered(self):
        """This round's experience: the agent's :meth:`collect` here, or every worker's, acted with the same
        weights and joined along the env axis."""
        if not self.workers:
            return self.collect()
        segments = self.pool.gather(self)
        self.take_segments(segments, self.n_envs)
        return join([segment.experience for segment in segments])

    def take_segments(self, segments: Sequence[Segment], stride: int) -> None:
        """Count the env steps of workers' ``segments`` and record their episodes and statistics as a local
        run would: an episode that ended at vector step ``t`` ends ``(t + 1) * stride`` steps on."""
        now, start = time.perf_counter(), self.steps
        ended = sorted(((t, worker, score) for worker, segment in enumerate(segments) for score, t in segment.episodes),
                       key=lambda episode: episode[:2])  # stable: a worker's envs keep their order
        self.finished_episodes.extend(Episode(float(score), start + (t + 1) * stride, now) for t, _, score in ended)
        per_worker = self.envs.num_envs
        self.steps += sum(segment.vector_steps for segment in segments) * per_worker
        statistics = self.running_statistics()
        for segment in segments:
            for name, (mean, var, count) in segment.moments.items():
                if count:
                    statistics[name].update_from_moments(mean, var, count)

    def collect(self):
        """Act in the envs for one round; what the agent learns from (workers return it to the learner)."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------- training
    def act(self, observations: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Actions for a batch of observations, as the env expects them (see :meth:`env_actions`)."""
        raise NotImplementedError

    def predict(self, observation: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Env-ready actions for one observation or a batch of them, batched as given (Stable-Baselines3's
        ``predict``), with the observation normalisation and action scaling of training; nothing learns.
        Envs with Discrete states (FrozenLake) may give their state indices, one-hot encoded here as in training.

        Raises:
            ValueError: the observation has neither the env's observation shape nor a batch of it.
        """
        space = self.envs.single_observation_space
        observations, states = np.asarray(observation), one_hot_size(space)
        if states and np.issubdtype(observations.dtype, np.integer) and observations.ndim <= 1:
            observations = np.eye(states, dtype=space.dtype)[observations]  # Discrete states, one-hot as in training
        observations = observations.astype(space.dtype, copy=False)
        single = observations.shape == space.shape
        if not single and observations.shape[1:] != space.shape:
            raise ValueError(f'expected an observation shaped {space.shape} or a batch shaped (n, '
                             f'{", ".join(map(str, space.shape))}), got shape {observations.shape}')
        actions = self.act(observations[None] if single else observations, deterministic)
        return actions[0] if single else actions

    def policy_graph(self, observations: tf.Tensor) -> tf.Tensor:
        """Deterministic env-ready actions for a batch of raw observations, in TensorFlow ops only (what
        :meth:`export` writes): observation normalisation, the policy's mode, action scaling."""
        return self.env_actions_graph(self.greedy_graph(self.normalized_graph(observations)))

    def normalized_graph(self, observations: tf.Tensor) -> tf.Tensor:
        """:meth:`normalized` in graph ops, with the statistics of now as constants."""
        stats = self.observation_stats
        if stats is None:
            return observations
        scaled = (tf.cast(observations, tf.float32) - stats.mean.astype(np.float32)) / np.sqrt(
            stats.var + 1e-8).astype(np.float32)
        return tf.clip_by_value(scaled, -self.observation_clip, self.observation_clip)

    def greedy_graph(self, observations: tf.Tensor) -> tf.Tensor:
        """The policy's deterministic actions (inside the agent: indices, or ``[-1, 1]`` / raw Box
        actions) for normalised observations, in graph ops."""
        raise NotImplementedError

    def env_actions_graph(self, actions: tf.Tensor) -> tf.Tensor:
        """:meth:`env_actions` in graph ops."""
        space = self.envs.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            return tf.cast(actions, tf.int64) + int(space.start)
        return actions

    def export(self, path: str, format: str | None = None) -> str:
        """Write the deterministic policy as a standalone model at ``path``: raw observations in,
        env-ready actions out, normalisation and action scaling inside.

        Args:
            path: File (tflite, onnx) or directory (saved_model) to write; it must not exist.
            format: saved_model, tflite or onnx (the last two need pip install 'xagents[export]');
                default: from the path, onnx for .onnx, tflite for .tflite, else saved_model.

        Returns:
            ``path``.
        """
        from xagents.utils.export import export_policy

        return export_policy(self.policy_graph, self.envs.single_observation_space, path, format)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """The agent's actions as the env takes them; the one place they are converted.

        Discrete actions are indices from 0 inside every agent and shifted by the space's
        ``start`` here; subclasses convert Box actions (clipped or scaled to the bounds).
        """
        space = self.envs.single_action_space
        if isinstance(space, gym.spaces.Discrete) and space.start:
            return actions + space.start
        return actions

    def train_once(self) -> dict[str, float]:
        """Interact with the envs and update once; return loss metrics."""
        raise NotImplementedError

    @validated
    def fit(
        self,
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
    ) -> Run:
        """Train until the mean reward reaches ``target_reward`` or ``max_steps`` env steps pass.

        Args:
            target_reward: Stop when the mean of the last ``reward_buffer_size`` episodes reaches it.
            max_steps: Stop after this many env steps (summed over envs).
            monitor_session: Log metrics to a wandb run of this name.
            tensorboard: Write TensorBoard summaries to this directory.
            eval_frequency: Every this many steps, play eval_episodes deterministic episodes.
            eval_episodes: Episodes per deterministic evaluation, each in its own env.
            stop_on: Judge target_reward on the 'train' mean reward or the latest 'eval' reward.
            callbacks: More :class:`xagents.callbacks.Callback` s, after the built-in ones.
            total: Count max_steps over all the agent's steps (earlier fits, a resumed history), not
                only this call's (Stable-Baselines3's reset_num_timesteps=False).
            save_dir: Save the whole agent (loadable by load, --weights) into this directory: every
                save_frequency steps as step-N, and the best-evaluated one as best-eval.
            save_frequency: Steps between saves into save_dir.
            save_keep: Periodic saves kept in save_dir (the oldest go).
            save_replay_buffer: Saves into save_dir include the replay buffer (off-policy agents, ACER),
                so a run resumed from one learns at once.

        Returns:
            The run: its mean, best and evaluation rewards, why it stopped, and the history.
        """
        if stop_on == 'eval' and not eval_frequency:
            raise ValueError('stop_on eval needs an eval_frequency')
        if eval_frequency and not (env_settings(self.envs) or {}).get('env_id'):
            raise ValueError("eval_frequency evaluates on envs made from the agent's env id, and this agent's envs "
                             'were not made from one: build it with from_env, or evaluate after fit (evaluate(agent, env))')
        if (save_frequency or save_replay_buffer) and not save_dir:
            raise ValueError('save_frequency and save_replay_buffer need a save_dir')
        if save_replay_buffer and not hasattr(self, 'buffer'):
            raise ValueError(f'{type(self).__name__} keeps no replay buffer to save')
        built_in: list[Callback] = [Checkpoints(), ProgressLines(quiet=self.quiet)]
        if not self.quiet:
            built_in.append(ProgressBar())
        if eval_frequency:
            built_in.append(Evaluation(eval_frequency, eval_episodes, quiet=self.quiet))
        if monitor_session:
            built_in.append(Wandb(monitor_session))
        if tensorboard:
            built_in.append(TensorBoard(tensorboard))
        if save_dir:
            built_in.append(Saves(save_dir, save_frequency, save_keep, save_replay_buffer))
        if self.plateau_start_steps is not None:
            built_in.append(Plateau(self.plateau_start_steps, self.plateau_reduce_factor,
                                    self.plateau_reduce_patience, self.early_stop_patience))
        run = Run(self, [*built_in, *callbacks], target_reward, max_steps, stop_on, total)
        self.check_outputs(tensorboard, save_dir)
        if save_dir:
            self.written_save_dirs.add(os.path.realpath(save_dir))
        try:
            run.start()  # starts the workers, if any
            try:
                while run.reason is None:  # collect and update; the run records, logs, saves and judges
                    metrics = self.train_once()
                    if self.lr_decay_steps:
                        self.update_learning_rates()
                    run.end_round(metrics, self.take_episodes())
            finally:
                run.finish()
        finally:
            self.stop_workers()
        return run

    def check_outputs(self, tensorboard: str | None = None, save_dir: str | None = None) -> None:
        """Refuse, before a run touches anything, files it would overwrite or could not write; remove
        temporary files that a killed write of them left."""
        if len(self.history.saved) and not self.training_started and not self.weights_loaded:
            raise ValueError(
                f'history {self.history_checkpoint} exists: load its weights to resume (--weights), '
                'or choose another history file'
            )
        for path in self.checkpoints or ():
            if os.path.exists(path) and path not in self.weights_loaded and not self.training_started:
                raise ValueError(
                    f'checkpoint {path} exists: pass it as weights to resume, or choose another path'
                )
        if save_dir and self.saves_of_another_run(save_dir):
            raise ValueError(f'save_dir {save_dir} holds the saves of another run: resume from one (--weights '
                             f'{os.path.join(save_dir, "step-...")}), or choose another directory')
        outputs = [path for path in [*(self.checkpoints or ()), self.history_checkpoint, tensorboard, save_dir] if path]
        real = [os.path.realpath(path) for path in outputs]
        for path in outputs:
            if real.count(os.path.realpath(path)) > 1:
                raise ValueError(f'expected a path of its own for each output (checkpoints, history, tensorboard, '
                                 f'save_dir), got {path} twice')
        for directory in (tensorboard, save_dir):
            if directory:
                check_writable(directory, directory=True)
        for path in [*(self.checkpoints or ()), self.history_checkpoint]:
            if path:
                check_writable(path)
                for name in remove_stale_temporaries(path):
                    logger.info('Removed %s, left by an interrupted write', name)

    def saves_of_another_run(self, save_dir: str) -> bool:
        """Whether ``save_dir`` holds saves that this agent neither wrote (earlier fits) nor was loaded from:
        its periodic saves and best-eval would replace them."""
        if not os.path.isdir(save_dir) or os.path.realpath(save_dir) in self.written_save_dirs:
            return False
        if not any(name.startswith('step-') or name.startswith('best-eval') for name in os.listdir(save_dir)):
            return False
        inside = os.path.realpath(save_dir) + os.sep
        return not any(os.path.realpath(path).startswith(inside) for path in self.weights_loaded)

    def config(self) -> dict:
        """Hyperparameters worth recording with a run."""
        return {key: value for key, value in vars(self).items()
                if isinstance(value, (int, float, str, bool)) and not key.startswith('_')}

    def start_envs(self, seed: int | None = None) -> None:
        """Reset the envs (seeded: ``seed``, else the agent's) before the first run; later runs go on where the
        last one stopped. With ``workers``, start them instead (each fit starts its own)."""
        if self.workers:
            if self.pool is None:
                self.pool = WorkerPool(self, self.workers, self.ray_address)
            self.training_started = True
        elif not self.training_started:
            self.episode_scores = EpisodeScores(self.envs)
            self.observations = self.envs.reset(seed=self.seed if seed is None else seed)[0]
            self.training_started = True

    def stop_workers(self) -> None:
        """Stop the workers of a fit (and the Ray instance it started)."""
        if self.pool is not None:
            self.pool, pool = None, self.pool
            pool.close()

    def step_envs(self, actions: np.ndarray):
        """Send the agent's ``actions`` (see :meth:`env_actions`) to every env; note finished episodes.

        Returns:
            ``(next_observations, rewards, terminated, truncated, final_observations)`` where
            ``final_observations`` equals ``next_observations`` except for envs whose episode
            ended, which hold the episode's true final observation.
        """
        next_observations, rewards, terminated, truncated, info = self.envs.step(self.env_actions(actions))
        self.steps += self.envs.num_envs
        dones = terminated | truncated
        final_observations = next_observations
        if dones.any():
            final_observations = next_observations.copy()
            ended = np.flatnonzero(dones)
            final_observations[ended] = np.stack(info['final_obs'][ended])
        _, scores, _ = self.episode_scores.update(rewards, dones, info)
        if len(scores):
            now = time.perf_counter()
            self.finished_episodes.extend(Episode(float(score), self.steps, now) for score in scores)
        return next_observations, rewards, terminated, truncated, final_observations

    def bootstrapped(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                     finals: np.ndarray) -> np.ndarray:
        """``rewards`` plus ``gamma * V(final observation)`` where a time limit cut the episode short: a
        truncation is no terminal state (Pardo et al. 2018, https://arxiv.org/abs/1712.00378). Agents
        that learn from rollouts call it with their ``forward`` returning ``(..., values)``."""
        bootstrap = truncated & ~terminated
        if not bootstrap.any():
            return rewards
        return rewards + self.gamma * bootstrap * self.forward(self.normalized(finals))[1]

    def take_episodes(self) -> list[Episode]:
        """The episodes finished since the last call: what a round's collection hands its run."""
        episodes, self.finished_episodes = self.finished_episodes, []
        return episodes

    def evaluate(self, episodes: int = 10, env: str | gym.Env | gym.vector.VectorEnv | None = None,
                 deterministic: bool = True, seed: int | None = None) -> EvaluationResult:
        """Play ``episodes`` whole episodes; their returns and lengths (see :func:`xagents.evaluate`)."""
        return evaluate(self, env, episodes, deterministic, seed)

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
        from xagents.utils.play import play_episodes

        games = play_episodes(self, env_id, video_dir, frame_dir, frame_frequency, max_steps, render,
                              0 if seed is None else seed, episodes)
        return EvaluationResult(*(np.asarray(column) for column in zip(*games)))


class OnPolicy(BaseAgent):
    """Agents that learn from the rollout they just collected (A2C, PPO, TRPO).

    Acting runs in NumPy on a copy of the weights when the model is a small MLP (a graph call
    costs more than the whole forward pass), otherwise in one ``tf.function`` per vector step.
    Truncated episodes are bootstrapped: ``gamma * V(final observation)`` joins the last reward.
    """

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
            sde_sample_freq: Steps (per env) between new gSDE noise; default: new noise each rollout.
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
        space = envs.single_observation_space
        per_step = self.n_envs * (space.dtype.itemsize * int(np.prod(space.shape)) + 64)
        # The rollout, its flattened copy for the update and the update's own tensors.
        check_fits(f'a rollout of {n_steps:,} steps of {self.n_envs} envs', 3 * per_step * n_steps, 'lower --n-steps')
        # Filled by the envs this process steps (a learner with workers joins theirs instead).
        self.rollout = RolloutBuffer(n_steps, envs.num_envs, space, flat_actions(envs.single_action_space))
        self.return_stats = RunningMeanStd(shape=()) if normalize_rewards else None
        self.discounted_returns = np.zeros(envs.num_envs)  # per env, for return_stats

    def policy_outputs(self) -> list[Output]:
        """The outputs of an actor-critic model: distribution parameters and a value."""
        return [Output('policy', self.distribution.output_units()), Output('value', 1)]

    def build_actor_critic(self, model) -> tf.keras.Model:
        """Build the actor-critic model and, for Box actions, its learned ``log_std``."""
        model = self.with_log_std(self.build('model', model, self.policy_outputs(), features=self.use_sde))
        self.act_with(model)
        return model

    def act_with(self, *models: tf.keras.Model) -> None:
        """Act with ``models``, whose outputs are the distribution parameters then the value (one
        actor-critic model, or an actor and a critic)."""
        self.policy_and_value = self.acting(*models)
        self.on_weights_changed()

    def with_log_std(self, policy: tf.keras.Model) -> tf.keras.Model:
        """For Box actions, give ``policy`` a learned ``log_std`` (saved with it): state-independent ``(d,)``,
        or with gSDE the ``(features, d)`` log sigma of the noise matrix."""
        if isinstance(self.distribution, DiagGaussian) and not hasattr(policy, 'log_std'):
            shape = (self.distribution.dim,)
            if self.use_sde:
                outputs = policy.outputs
                if len(outputs) != 3 or outputs[0].shape[-1] != self.distribution.dim:
                    raise ValueError(f'with use_sde the model returns [means ({self.distribution.dim} units), value, '
                                     f'features], got outputs of shapes {[tuple(output.shape) for output in outputs]}')
                shape = (outputs[-1].shape[-1], self.distribution.dim)
            policy.log_std = policy.add_weight(shape=shape, name='log_std',
                                               initializer=tf.keras.initializers.Constant(self.log_std_init))
        return policy

    def on_weights_changed(self) -> None:
        super().on_weights_changed()
        policy = self.models.get(self.model_roles[0])
        self.log_std_np = policy.log_std.numpy() if hasattr(policy, 'log_std') else None
        if self.sde:
            self.sde.reset()

    def forward(self, observations: np.ndarray) -> tuple[np.ndarray | tuple[np.ndarray, np.ndarray], np.ndarray]:
        """Distribution parameters (with gSDE: means and features) and values ``(B,)`` for a batch of observations."""
        params, values, *features = self.policy_and_value(observations)
        return (params, *features) if features else params, values[:, 0]

    def policy_value(self, observations: tf.Tensor) -> tuple:
        """Graph-mode :meth:`forward` of the actor-critic model."""
        params, values, *features = self.model(observations)
        return (params, *features) if features else params, values

    def sample_actions(self, params, deterministic: bool = False):
        """Actions drawn from the distributions of ``params`` (their modes if ``deterministic``), with their log-probabilities."""
        if self.sde:
            mean, features = params
            if deterministic:
                return self.distribution.sample_np(mean, self.log_std_np, self.rng, True)
            noise = self.sde.noise(features, self.log_std_np, self.rng)
            log_std = StateDependentNoise.log_std_np(features, self.log_std_np)
            return self.distribution.with_log_probs(mean + noise, noise * np.exp(-log_std), log_std)
        if self.log_std_np is not None:
            return self.distribution.sample_np(params, self.log_std_np, self.rng, deterministic)
        return self.distribution.sample_np(params, self.rng, deterministic)

    def log_prob_entropy(self, params, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph-mode log-probabilities of ``actions`` and entropies under ``params``."""
        if isinstance(self.distribution, DiagGaussian):
            log_std = self.models[self.model_roles[0]].log_std  # the policy's
            if self.sde:
                params, features = params
                log_std = StateDependentNoise.log_std(features, log_std)
            return (self.distribution.log_prob(params, log_std, actions),
                    self.distribution.entropy(params, log_std))
        return self.distribution.log_prob(params, actions), self.distribution.entropy(params)

    def act(self, observations: np.ndarray, deterministic: bool = False) -> np.ndarray:
        actions, _ = self.sample_actions(self.forward(self.normalized(observations))[0], deterministic)
        return self.env_actions(actions)

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        if isinstance(self.distribution, DiagGaussian):
            return self.distribution.clip(actions)
        return super().env_actions(actions)

    def greedy_graph(self, observations: tf.Tensor) -> tf.Tensor:
        params = tf.nest.flatten(self.models[self.model_roles[0]](observations))[0]  # (the means with gSDE)
        return params if isinstance(self.distribution, DiagGaussian) else tf.argmax(params, -1)

    def env_actions_graph(self, actions: tf.Tensor) -> tf.Tensor:
        if isinstance(self.distribution, DiagGaussian):
            space = self.envs.single_action_space
            clipped = tf.clip_by_value(actions, space.low.ravel(), space.high.ravel())
            return tf.reshape(clipped, (-1, *space.shape))
        return super().env_actions_graph(actions)

    def collect(self) -> Rollout:
        """Fill the rollout buffer with ``n_steps`` vector steps from every env."""
        rollout = self.rollout
        for t in range(self.n_steps):
            observations = self.observe(self.observations)
            params, values = self.forward(observations)
            actions, log_probs = self.sample_actions(params)
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
        return rollout.filled(self.forward(self.normalized(self.observations))[1])

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
        return {'mini_batches': 1} if 'mini_batches' in self.parameter_names() else {}

    def train_once(self) -> dict[str, float]:
        rollout = self.gathered()
        advantages, returns = gae(rollout.rewards, rollout.values, rollout.dones, rollout.last_values,
                                  self.gamma, self.lam)
        n = self.n_steps * self.n_envs
        metrics = self.train_step(
            rollout.observations.reshape(n, *rollout.observations.shape[2:]),
            rollout.actions.reshape(n, *rollout.actions.shape[2:]),
            rollout.log_probs.reshape(n),
            advantages.reshape(n),
            returns.reshape(n),
        )
        self.on_weights_changed()
        return metrics

    def train_step(self, observations, actions, log_probs, advantages, returns) -> dict:
        """One update from a flattened rollout (a ``tf.function`` in each agent)."""
        raise NotImplementedError


class OffPolicy(BaseAgent):
    """Agents that learn from a replay buffer (DQN, DDPG, TD3, SAC).

    Each :meth:`train_once` acts for ``update_every`` env steps and stores every transition with
    its true final observation, so a time-limit truncation bootstraps and a termination does not
    (Pardo et al. 2018, https://arxiv.org/abs/1712.00378). Learning starts once
    ``buffer_initial_size`` transitions have been added to the buffer (SB3's ``learning_starts``;
    a full buffer holds fewer, as each episode end keeps a slot) and ``update_after`` env steps
    have passed; actions are uniformly random for the first ``start_steps`` env steps. An update
    samples the minibatches of all its ``gradient_steps`` at once in NumPy (each its own sample of
    the whole buffer) and runs them in one graph call: a loop over the agent's ``train_step`` (one
    gradient step: the algorithm's maths), the target networks moving towards their online
    networks by Polyak averaging every ``target_update_interval`` gradient steps. One graph call
    costs ~0.7 ms here whatever it computes, so Spinning Up's ``update_every = gradient_steps =
    50`` keeps one gradient step per env step while paying that cost once per 50 steps.

    Box actions live in ``[-1, 1]`` inside the agent and the buffer and are scaled to the env's
    bounds when sent. Small MLP policies act in NumPy on a copy of their weights.

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
            gradient_steps: Gradient steps per update, all run in one graph call.
            start_steps: Env steps acted uniformly at random (default: buffer_initial_size).
            update_after: Env steps before the first update, if later than the buffer's initial fill.
            return_steps: Rewards summed into each sampled transition (n-step returns).
            tau: Polyak coefficient of the target networks (1 copies them).
            prioritized: Sample transitions in proportion to their TD error (Schaul et al. 2016).
            priority_alpha: Prioritised replay exponent alpha.
            priority_beta: Initial importance-sampling exponent, annealed to 1.
            priority_beta_steps: Env steps over which beta reaches 1.
            jit_compile: Compile updates with XLA; default: when every cfg model is a dense MLP
                (~5x faster for those on CPU, slower for wide or convolutional ones).
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
        buffer_class = PrioritizedReplayBuffer if prioritized else ReplayBuffer
        buffer_kwargs = dict(alpha=priority_alpha, beta=priority_beta,
                             beta_steps=priority_beta_steps) if prioritized else {}

        def replay_buffer(capacity: int) -> ReplayBuffer:
            return buffer_class(capacity, self.n_envs, envs.single_observation_space, stored_actions,
                                n_steps=return_steps, gamma=self.gamma, seed=random_stream(self.seed, REPLAY),
                                frame_stack_axis=-1 if frame_stacked(envs) else None, **buffer_kwargs)

        per_transition = replay_buffer(self.n_envs * (return_steps + 1024)).bytes_per_transition  # pages untouched
        check_fits(f'a replay buffer of {buffer_max_size:,} transitions', per_transition * buffer_max_size,
                   'lower --buffer-max-size')
        self.buffer = replay_buffer(buffer_max_size)
        self.target_pairs: list[tuple[tf.keras.Model, tf.keras.Model]] = []
        self.gradient_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name='gradient_updates')
        # Noise inside updates comes from a seeded generator: XLA would reseed unseeded random ops.
        self.graph_rng = (tf.random.Generator.from_non_deterministic_state() if self.seed is None
                          else tf.random.Generator.from_seed(self.seed))
        self.episode_starts = np.ones(envs.num_envs, bool)

    def training_state(self) -> dict:
        return {**super().training_state(), 'gradient_updates': int(self.gradient_updates.numpy()),
                'graph_rng': [self.graph_rng.algorithm, self.graph_rng.state.numpy().tolist()]}

    def restore_training_state(self, state: dict) -> None:
        super().restore_training_state(state)
        self.gradient_updates.assign(state['gradient_updates'])
        self.graph_rng.reset(tf.constant(state['graph_rng'][1], tf.int64))

    # ------------------------------------------------------------------- model helpers
    def build_target(self, role: str, online: tf.keras.Model) -> tf.keras.Model:
        """A copy of ``online`` that follows it by Polyak averaging (saved under ``role``)."""
        target = tf.keras.models.clone_model(online)
        target.set_weights(online.get_weights())
        target.trainable = False
        self.models[role] = target
        self.target_pairs.append((target, online))
        return target

    def build_critic(self, role: str, given, outputs: Sequence[Output]) -> tf.keras.Model:
        """Build (or accept) a Q-model: its input is the observation, with the action appended
        for Box action spaces (then observations must be vectors)."""
        space = self.envs.single_observation_space
        if not self.discrete:
            if len(space.shape) != 1:
                raise ValueError(f'{type(self).__name__} with Box actions expected vector observations, '
                                 f'got shape {space.shape}')
            size = space.shape[0] + int(np.prod(self.action_low.shape))
            space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        model = self.model_file(role, space, given)
        if not isinstance(model, tf.keras.Model):
            model = build_model(model, space, outputs, name=role)
        self.models[role] = model
        return model

    def q_values(self, model: tf.keras.Model, observations: tf.Tensor, actions: tf.Tensor | None = None):
        """Every head's Q-values: ``(heads, batch)`` of Box ``actions``, ``(heads, batch, n)`` without."""
        if actions is None:
            return tf.stack(tf.nest.flatten(model(observations)))
        inputs = tf.concat([tf.cast(observations, tf.float32), actions], -1)
        return tf.stack(tf.nest.flatten(model(inputs)))[..., 0]

    # ------------------------------------------------------------------------ acting
    def random_actions(self) -> np.ndarray:
        """Uniform random actions for every env: indices, or points of ``[-1, 1]^d``."""
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

    def env_actions_graph(self, actions: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return super().env_actions_graph(actions)
        low, high = self.action_low.astype(np.float32), self.action_high.astype(np.float32)
        scaled = low + (tf.clip_by_value(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
        return tf.reshape(scaled, (-1, *self.envs.single_action_space.shape))

    def explore(self, observations: np.ndarray) -> np.ndarray:
        """Training actions (agent space: indices, or ``[-1, 1]`` for Box) for a batch of observations."""
        raise NotImplementedError

    def policy(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        """Actions in the agent's space; ``act`` scales them for the env."""
        raise NotImplementedError

    def act(self, observations: np.ndarray, deterministic: bool = False) -> np.ndarray:
        observations = self.normalized(observations)
        if deterministic:
            return self.env_actions(self.policy(observations, True))
        return self.env_actions(self.explore(observations))

    # ---------------------------------------------------------------------- training
    def explore_step(self) -> tuple[np.ndarray, ...]:
        """One vector step with training actions; the transition as the buffer takes it (observations raw:
        they are normalised with the statistics of each update)."""
        observations = self.observations
        seen = self.observe(observations)
        actions = self.random_actions() if self.steps < self.start_steps else self.explore(seen)
        next_observations, rewards, terminated, truncated, finals = self.step_envs(actions)
        self.observations, self.episode_starts = next_observations, terminated | truncated
        return observations, actions, rewards, finals, terminated, truncated

    def collect(self, vector_steps: int) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """A worker's segment: ``vector_steps`` transitions of every env, stacked ``(vector_steps, n_envs, ...)``,
        and with prioritised replay their :meth:`estimates` (else None)."""
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
                    self.buffer.add(*transition, columns=columns)
                else:  # Ape-X: priorities from the worker's estimates, not the running max
                    self.buffer.add(*transition, columns=columns, values=values[:, t])
            self.take_segments([segment], per_worker)
        else:
            for _ in range(self.update_every // self.n_envs):
                self.buffer.add(*self.explore_step())
        if self.buffer.steps < self.buffer_initial_size or self.steps < self.update_after:
            return {}
        return self.update()

    def worker_models(self) -> list[tf.keras.Model]:
        # With prioritised replay a worker also estimates its transitions' TD errors: it needs every model.
        return list(self.models.values()) if self.prioritized else super().worker_models()

    def estimates(self, transitions: tuple[np.ndarray, ...]) -> np.ndarray:
        """What an Ape-X worker (Horgan et al. 2018) sends for the initial priorities of its ``transitions``
        (``(T, n_envs, ...)`` arrays in :meth:`explore_step`'s order): ``(2, T, n_envs)``, the first critic's
        ``Q(s, a)`` and the value ``V(s')`` the TD target bootstraps from, under its copy of the learner's
        networks, in one graph call. The learner's buffer turns them into each n-step window's TD error as it
        computes the window's return, when the window is complete: the last n - 1 transitions of a segment
        complete theirs in the next one, so they take ``V(s')`` from the next segment's networks, one update on."""
        observations, actions, _, next_observations = transitions[:4]
        shape = actions.shape[:2]
        flat = [np.reshape(array, (-1, *np.shape(array)[2:])) for array in (observations, actions, next_observations)]
        values = self.compiled_estimates(self.normalized(flat[0]), flat[1].astype(self.buffer.action_space.dtype),
                                         self.normalized(flat[2]))
        return values.numpy().reshape(2, *shape)

    @functools.cached_property
    def compiled_estimates(self):
        """``(Q(s, a), V(s'))`` of a batch as one graph (see :meth:`estimates`)."""
        return tf.function(lambda observations, actions, next_observations: tf.stack([
            self.action_values(observations, actions)[0], self.next_values(next_observations)]))

    def worker_settings(self) -> dict:
        size = self.envs.num_envs * (self.return_steps + 8)  # a small buffer: workers only act
        # start_steps defaults to buffer_initial_size: the learner's, not the small buffer's.
        return {'buffer_max_size': size, 'buffer_initial_size': size, 'buffer_batch_size': 1,
                'start_steps': self.start_steps}

    def update(self) -> dict:
        """Sample ``gradient_steps`` minibatches and train on them in one graph call."""
        batch = self.buffer.sample(self.buffer_batch_size, self.gradient_steps)
        shape = (self.gradient_steps, self.buffer_batch_size)
        # The buffer keeps raw observations: they are scaled with the statistics of now.
        batch = batch._replace(observations=self.normalized(batch.observations),
                               next_observations=self.normalized(batch.next_observations))
        arrays = [array.reshape(shape + array.shape[1:]) for array in batch[:6]]
        metrics, td_errors = self.compiled_train_steps(*arrays)
        if self.prioritized:
            self.buffer.update_priorities(batch.indices, td_errors.numpy().ravel())
        self.on_weights_changed()
        return metrics

    @functools.cached_property
    def compiled_train_steps(self):
        """:meth:`train_steps` as one graph, XLA-compiled as ``jit_compile`` says."""
        jit_compile = self.jit_compile
        if jit_compile is None:
            cfg_models = [model for model in self.models.values() if hasattr(model, 'layer_graph')]
            jit_compile = bool(cfg_models) and all(map(NumpyForward.supports, cfg_models))
        return tf.function(self.train_steps, jit_compile=jit_compile)

    def train_steps(self, observations, actions, rewards, next_observations, discounts, weights):
        """Run ``train_step`` on each of the ``(gradient_steps, batch, ...)`` batches in the graph.

        Returns:
            The last step's metrics and the TD errors ``(gradient_steps, batch)`` (priorities).
        """
        steps = observations.shape[0]  # static: one trace per number of gradient steps
        metrics = {name: tf.constant(0.0) for name in self.metric_names}
        td_errors = tf.TensorArray(tf.float32, size=steps)
        for g in tf.range(steps):
            step_metrics, errors = self.train_step(observations[g], actions[g], rewards[g],
                                                   next_observations[g], discounts[g], weights[g])
            metrics = {name: tf.cast(step_metrics[name], tf.float32) for name in self.metric_names}
            td_errors = td_errors.write(g, tf.cast(errors, tf.float32))
            self.gradient_updates.assign_add(1)
            if self.gradient_updates % self.target_update_interval == 0:
                for target, online in self.target_pairs:
                    polyak_update(target.weights, online.weights, self.tau)
        return metrics, td_errors.stack()

    def train_step(self, observations, actions, rewards, next_observations, discounts, weights):
        """One gradient step on a batch (traced into :meth:`train_steps`).

        Args:
            observations: ``(batch, *observation_shape)``.
            actions: ``(batch,)`` int64 indices or ``(batch, action_dim)`` in ``[-1, 1]``.
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


def polyak_update(targets: Sequence[tf.Variable], sources: Sequence[tf.Variable], tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` for each pair; ``tau = 1`` copies."""
    for target, source in zip(targets, sources):
        target.assign(source if tau == 1 else target + tau * (source - target))


def identity_of(agent: str, envs: gym.vector.VectorEnv) -> dict[str, str | None]:
    """What files made by ``agent`` on ``envs`` record of their origin: agent, env id (if known), spaces."""
    return {'agent': agent, 'env_id': (env_settings(envs) or {}).get('env_id'),
            'observation_space': str(envs.single_observation_space), 'action_space': str(envs.single_action_space)}


def flat_actions(space: gym.Space) -> gym.Space:
    """The action space as agents store it: a Box flattened to a vector, anything else as it is."""
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(space.low.ravel(), space.high.ravel(), dtype=space.dtype)
    return space


def random_stream(seed: int | None, purpose: int, *more: int) -> np.random.Generator:
    """The NumPy generator an agent seeded with ``seed`` uses for ``purpose``.

    Gymnasium seeds env ``i`` with ``default_rng(seed + i)``: an agent drawing from
    ``default_rng(seed)`` would repeat env 0's draws (its reset states) in its own actions. Streams
    keyed by ``[seed, purpose]`` are shared with no env and with no other purpose.
    """
    return np.random.default_rng(None if seed is None else [seed, purpose, *more])

"""Experience collection on Ray workers: the learner trains, workers own envs and act.

On-policy agents collect synchronously: each round every worker receives the current acting weights
(NumPy arrays) and running statistics, acts ``n_steps`` in its ``n_envs`` envs and returns its rollout
segment; the learner joins the segments along the env axis, so a round means what a local round of
``workers x n_envs`` envs means. Off-policy agents follow Ape-X (Horgan et al. 2018,
https://arxiv.org/abs/1803.00933): every worker acts on its own, with its own exploration and the
learner's weights of when it started the segment, and streams segments of ``update_every`` env steps into
the learner's replay buffer, one update per segment; a worker starts its next segment as soon as the learner
takes one, so it acts one update behind while the learner updates. With prioritised replay a worker also
sends what its transitions' TD errors are made of (it receives every network of the learner, not only
the policy), and each transition enters the buffer at the priority of its n-step TD error rather than at the
running maximum, as Ape-X's actors compute them. A worker that dies is restarted by Ray with fresh envs; the
learner logs it and asks the new worker for the lost segment.

Ray is optional (the ``distributed`` extra) and imported only when workers are asked for.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from xagents.envs.creation import EnvError
from xagents.utils.extras import require

if TYPE_CHECKING:
    from xagents.agent.base import BaseAgent

logger = logging.getLogger('xagents')
RESTART_TRIES = 30  # consecutive failed calls to one worker (about a minute) before the run gives up
GCS_TIMEOUT_MS = 5_000  # how long a first call to a cluster's GCS may take, after Ray's 2 x 5 s to connect


class WorkerError(RuntimeError):
    """A worker that Ray could not bring back."""


def require_ray(address: str | None = None):
    """The ``ray`` module, or a ValueError naming the extra that installs it.

    Settings Ray reads are made first: loopback clusters stay on loopback, segments a stopped run drops are not
    reported, and a driver joining ``address`` uses token authentication when a token is at hand, as ``ray start`` does
    (else it cannot join a cluster started with one, and says only that it failed to connect).
    """
    os.environ.setdefault('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', '0')  # else a Ray on 127.0.0.1 listens everywhere
    # The pool reads every segment it uses; those in flight when a run stops (another worker's failure, say)
    # are dropped on purpose, and Ray would log each as an unhandled error, traceback and all.
    os.environ.setdefault('RAY_IGNORE_UNHANDLED_ERRORS', '1')
    token = os.environ.get('RAY_AUTH_TOKEN_PATH', os.path.expanduser('~/.ray/auth_token'))
    if address and 'RAY_AUTH_MODE' not in os.environ and ('RAY_AUTH_TOKEN' in os.environ or os.path.exists(token)):
        os.environ['RAY_AUTH_MODE'] = 'token'
    require('ray', 'distributed', 'collecting with workers')
    import ray

    return ray


class Segment(NamedTuple):
    """What a worker returns for one call."""

    experience: tuple  # the agent's ``collect`` output: arrays with the env axis (1 if 2-D or more, else 0)
    episodes: list[tuple[float, int]]  # (score, index of the vector step it ended in)
    moments: dict[str, tuple[np.ndarray, np.ndarray, float]]  # running statistics' (mean, var, count) of the segment
    vector_steps: int
    fresh: bool  # the worker's envs were reset for this segment (a new or restarted worker)


class Worker:
    """A Ray actor owning ``n_envs`` envs and an agent that acts on them (it never trains).

    In a first fit (``first_step`` 0) worker ``index`` seeds its envs ``seed + index * n_envs ...``, as env
    ``index * n_envs + i`` of a local run, and draws its actions from a stream of its own (worker 0's is a
    local run's); a later fit seeds both from ``first_step`` too, so that it does not replay the first.
    """

    def __init__(self, agent_class: type, env_settings: dict, hyperparameters: dict, index: int, count: int,
                 first_step: int = 0) -> None:
        os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
        from xagents import backend
        from xagents.envs.creation import create_envs

        backend.limit_threads()  # a worker acts, mostly in NumPy: one thread each leaves the cores to the others
        seed = hyperparameters.get('seed')
        n_envs = env_settings['n_envs']
        if seed is None:
            self.env_seed = None
        elif first_step:
            self.env_seed = int(np.random.SeedSequence([seed, first_step, index]).generate_state(1)[0])
        else:
            self.env_seed = seed + index * n_envs
        self.agent = agent_class(create_envs(**env_settings, seed=self.env_seed), **hyperparameters)
        self.agent.become_worker(index, count, first_step)

    def pid(self) -> int:
        return os.getpid()

    def collect(self, acting: tuple[list[np.ndarray], dict[str, tuple]], steps: int, *args) -> Segment:
        """Act with the learner's weights and running statistics (``acting``) from its ``steps`` on: the
        agent's ``collect(*args)``."""
        agent, (weights, statistics) = self.agent, acting
        agent.set_acting_weights(weights)
        rounds = {}
        for name, stats in agent.running_statistics().items():
            stats.mean, stats.var, stats.count = statistics[name]
            rounds[name] = recorded(stats)
        fresh = not agent.training_started
        agent.start_envs(self.env_seed)
        agent.steps = steps
        experience = agent.collect(*args)
        episodes = [(episode.score, (episode.step - steps) // agent.n_envs - 1) for episode in agent.take_episodes()]
        moments = {name: (stats.mean, stats.var, stats.count) for name, stats in rounds.items()}
        return Segment(experience, episodes, moments, (agent.steps - steps) // agent.n_envs, fresh)


def check_reachable(address: str) -> None:
    """Refuse within about 15 s a ``HOST:PORT`` where no Ray cluster answers: nothing listens there (at once), or
    something that is not Ray's GCS does. ``ray.init`` would retry for many minutes, deaf to SIGTERM, and print
    Ray's own warnings; Ray's GCS client with a deadline runs in a child process instead, which keeps its
    output and is stopped with this one."""
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit() or '://' in address:
        return  # another form Ray accepts (ray://..., auto): left to Ray
    try:
        socket.create_connection((host.strip('[]'), int(port)), timeout=10).close()
    except OSError as error:
        raise unreachable(address, error.strerror or str(error)) from None
    probe = f'import ray._raylet; ray._raylet.InnerGcsClient.standalone({address!r}, None, {GCS_TIMEOUT_MS})'
    try:
        subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True, timeout=60)
    except subprocess.CalledProcessError as error:
        raise unreachable(address, cause(RuntimeError(error.stderr))) from None
    except subprocess.TimeoutExpired:
        raise unreachable(address, 'no answer within 60 s') from None


def unreachable(address: str, reason: str) -> ValueError:
    return ValueError(f'cannot reach a Ray cluster at {address}: {reason} (start one there with ray start --head, '
                      'or check the address)')


def cause(error: Exception) -> str:
    """The last line of a Ray error: the exception raised in the worker, where there is one."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__


def apex_exponent(index: int, count: int) -> float:
    """How much less worker ``index`` of ``count`` explores: Ape-X gives actor i the exploration rate
    ``0.4 ** (1 + 7 i / (count - 1))``, 0.4 times ``0.4 ** (7 i / (count - 1))``; agents multiply their own rate
    (or noise) by the latter, so worker 0 explores as a local run."""
    return 0.0 if count == 1 else 7.0 * index / (count - 1)


def recorded(stats):
    """Make ``stats`` (a ``RunningMeanStd``) also feed a fresh one, returned, with every update."""
    from gymnasium.wrappers.utils import RunningMeanStd

    fresh = RunningMeanStd(shape=np.shape(stats.mean))
    fresh.count = 0.0
    update = type(stats).update.__get__(stats)

    def update_both(x):
        update(x)
        fresh.update(x)

    stats.update = update_both
    return fresh


class WorkerPool:
    """The learner's handle on its workers: starts (or joins) Ray, creates them, calls them, restarts calls."""

    def __init__(self, agent: BaseAgent, count: int, address: str | None = None) -> None:
        env, hyperparameters = worker_arguments(agent)
        ray = require_ray(address)
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray and address:
            check_reachable(address)
        if self.owns_ray:
            # 'local': a new instance, even where a cluster runs (ray.init would join that one).
            options = dict(address=address or 'local')
            if not address:
                options.update(_node_ip_address='127.0.0.1', include_dashboard=False)
            try:
                ray.init(**options, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
            except ConnectionError as error:
                raise unreachable(address, f'{cause(error)}; with token authentication, give this machine its '
                                  'token') from None
        cpus = ray.cluster_resources().get('CPU', 1.0)
        remote = ray.remote(Worker).options(num_cpus=min(1.0, cpus / count), max_restarts=-1, max_task_retries=0)
        self.ray, self.count = ray, count
        self.actors = [remote.remote(type(agent), env, hyperparameters, index, count, agent.steps)
                       for index in range(count)]
        self.pending: dict[int, Any] = {}
        self.acting_ref, self.acting_version = None, None
        try:  # wait until every worker is built: training (and its clock) starts with all of them
            self.pids()
        except ray.exceptions.RayActorError as error:
            self.close()
            raise WorkerError(f'the workers could not start: {cause(error)}') from None

    def close(self) -> None:
        """Stop the workers, and the local Ray instance if this pool started it."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors, self.pending = [], {}
        if self.owns_ray:
            self.ray.shutdown()

    def pids(self) -> list[int]:
        """The process id of each worker (to watch or kill them)."""
        return self.ray.get([actor.pid.remote() for actor in self.actors])

    def launch(self, index: int, agent: BaseAgent, *args) -> None:
        """Ask worker ``index`` for a segment acted with the agent's weights and statistics of now."""
        statistics = {name: (stats.mean, stats.var, stats.count) for name, stats in agent.running_statistics().items()}
        version = (agent.weights_version, *(count for _, _, count in statistics.values()))
        if self.acting_version != version:  # one copy in the object store per version, shared by the workers
            self.acting_ref, self.acting_version = self.ray.put((agent.acting_weights(), statistics)), version
        self.pending[index] = self.actors[index].collect.remote(self.acting_ref, agent.steps, *args)

    def result(self, index: int, agent: BaseAgent, *args) -> Segment:
        """Worker ``index``'s pending segment; if the worker was lost, the same segment from its restart. Its env
        failing is an :class:`~xagents.envs.creation.EnvError` here too, naming the worker: a deterministic bug
        would fail again, so it is not retried."""
        error = None
        for attempt in range(RESTART_TRIES):
            try:
                return self.ray.get(self.pending.pop(index))
            except self.ray.exceptions.RayTaskError as failed:  # raised in the worker, which lives on: no retry
                if isinstance(failed.cause, EnvError):  # the same one line as an env of a local run
                    raise EnvError(f'{failed.cause} (worker {index})') from None
                raise
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError) as lost:
                error = lost
                if not attempt:
                    logger.warning('Worker %d was lost (%s): Ray restarts it and it collects its segment again',
                                   index, type(error).__name__)
                time.sleep(2.0)
                self.launch(index, agent, *args)
        raise WorkerError(f'worker {index} failed {RESTART_TRIES} times in a row, last with: {cause(error)}')

    def gather(self, agent: BaseAgent, *args) -> list[Segment]:
        """A segment from every worker, acted with the same weights (a synchronous round)."""
        for index in range(self.count):
            self.launch(index, agent, *args)
        return [self.result(index, agent, *args) for index in range(self.count)]

    def next(self, agent: BaseAgent, *args) -> tuple[int, Segment]:
        """The first segment any worker finishes (Ape-X): that worker starts its next one at once, with
        the agent's weights of now; workers that have no call in flight are started first."""
        for index in range(self.count):
            if index not in self.pending:
                self.launch(index, agent, *args)
        indices = {ref: index for index, ref in self.pending.items()}
        ready, _ = self.ray.wait(list(indices), num_returns=1)
        index = indices[ready[0]]
        segment = self.result(index, agent, *args)
        self.launch(index, agent, *args)
        return index, segment


def worker_arguments(agent: BaseAgent) -> tuple[dict, dict]:
    """What a worker of ``agent`` is built from: its envs' settings and the agent's hyperparameters, less the
    learner's own and with :meth:`~xagents.agent.base.BaseAgent.worker_settings`."""
    from xagents.envs.creation import env_settings, vector_settings
    from xagents.storage.saved import json_values

    settings = env_settings(agent.envs)
    if settings is None:
        raise ValueError('workers make their envs from an env id: build the agent with from_env or create_envs')
    hyperparameters, unsaved = json_values(agent.hyperparameters)
    if unsaved:
        raise ValueError(f'workers build their agents from settings that can be sent: give {unsaved[0]} as a '
                         'file (a .cfg), not an object')
    return vector_settings(agent.envs), {**hyperparameters, **agent.worker_settings()}


def join(parts: list) -> Any:
    """Worker experiences joined along the env axis: axis 1 of ``(T, n_envs, ...)`` arrays, 0 of ``(n_envs,)``."""
    first = parts[0]
    if first is None:  # a field no worker filled (action masks of envs that give none)
        return None
    if isinstance(first, tuple):
        return type(first)(*(join([part[i] for part in parts]) for i in range(len(first))))  # a NamedTuple
    return np.concatenate(parts, axis=1 if np.ndim(first) > 1 else 0)

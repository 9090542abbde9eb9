"""Hyperparameter search with Optuna: ``xagents tune`` and the same study from Python.

A search fixes, chooses among, or ranges over an agent's hyperparameters: those its package's
``cli.py`` lists in ``TUNABLE`` (with how to search them); types, defaults and help come from the
constructor signature, as for every flag. Each trial's agent is built as ``xagents train`` builds
it (``Agent.from_env`` with the per-env defaults), so the printed best command reproduces it.

Storage: with no URL the study lives in ``<study>.journal.log`` in the working directory
(Optuna's journal file, safe for several local processes, readable by ``optuna-dashboard``);
with a ``postgresql://`` or ``mysql://`` URL every machine running the same command joins one
study (Optuna's distributed mode), with heartbeats so that a dead worker's trial is failed.
What exists is checked before anything is written: a SQLite file holding another application's
tables, a journal path that is no file, a journal damaged before its last line, or a study resumed
with other settings (agent, env, budgets, searched ranges, fixed values) is refused, left as it is.

Isolation: every trial trains in a fresh Python process, because TensorFlow keeps the memory of
models built in a process (tensorflow issue 62854). The child only trains and writes one JSON
line per intermediate value to a pipe; the parent owns the Optuna trial: it reports the values,
asks the pruner, records heartbeats and tells the outcome. Relaying through the parent, rather
than letting the child open the storage, keeps one storage connection and the only copy of a
password per worker, decides pruning with the pruner this command configured, and turns a child
that dies in any way (exception, NaN, out of memory, killed) into a FAIL at once.

Counting: ``n_trials`` is the number of trials a search adds to the study, over all workers. The
first worker records the target (trials started so far + ``n_trials``) in the study; a worker
started while the target is unreached joins it, so the same command completes a search cut short
and extends a finished one. Trials are counted before each one is created, and a trial created
past the target by two workers racing goes back to WAITING (a later search runs it), so exactly
the target number of trials finish. (Optuna's ``MaxTrialsCallback`` counts only after a trial
ends, so two workers finishing together would both start one more.)
"""
from __future__ import annotations

import collections
import importlib
import importlib.util
import json
import logging
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Iterator, Mapping

import numpy as np
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage, fail_stale_trials
from optuna.trial import TrialState

from xagents.storage.checkpoints import NonFiniteError
from xagents.utils.console import console_logging
from xagents.storage.atomic import check_writable
from xagents.envs.creation import close_envs, env_spec
from xagents.app.named_networks import with_named_networks
from xagents.app.search_space import SearchSpace, agent_name, flag_words, hyperparameter_flags, search_space
from xagents.app.study import (HEARTBEAT_INTERVAL, PRUNERS, SAMPLERS, TARGET_ATTR, make_pruner, make_sampler, one_line,
                               open_storage, open_study)

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ the search
def tune(
    agent: type,
    env_id: str,
    search: Mapping[str, Any],
    study: str | None = None,
    storage: str | None = None,
    n_trials: int = 20,
    trial_steps: int = 100_000,
    n_reports: int = 10,
    eval_episodes: int = 0,
    warmup_trials: int = 5,
    sampler: str = 'tpe',
    pruner: str = 'median',
    n_jobs: int = 1,
    seed: int | None = None,
    plot: str | None = None,
) -> optuna.Study:
    """Search ``agent``'s hyperparameters on ``env_id``; log a line per trial, then the best.

    Args:
        agent: The agent class, e.g. ``xagents.PPO``.
        env_id: Gymnasium environment id.
        search: Parameter -> value (fixed), list (choices) or ``(MIN, MAX)`` (range).
        study: Study name (default: <agent>-<env>); the same name and storage continue a study.
        storage: Database URL shared by all workers, e.g. postgresql://user@host/db (a password may also come from PGPASSWORD or ~/.pgpass); default: <study>.journal.log in the working directory.
        n_trials: Trials this search adds, counted over all workers sharing the study; the same command completes a search cut short.
        trial_steps: Env steps each trial trains for.
        n_reports: Intermediate values each trial reports to the pruner, evenly spaced.
        eval_episodes: Judge trials by this many deterministic episodes at each report (0: the mean training reward of the last episodes).
        warmup_trials: Random trials before TPE starts, and complete trials before the median pruner starts.
        sampler: 'tpe' or 'random'.
        pruner: 'median', 'halving' (successive halving) or 'none'.
        n_jobs: Trials this process trains at once, each in its own process.
        seed: Seed of every trial's agent (default: the trial number, so each trial can be reproduced).
        plot: Directory to write optimisation-history, importance and parallel-coordinate PNGs to.

    Returns:
        The Optuna study.
    """
    for option, value in (('n_trials', n_trials), ('trial_steps', trial_steps), ('n_reports', n_reports),
                          ('n_jobs', n_jobs)):
        if value < 1:
            raise ValueError(f'expected {option} >= 1, got {value}')
    for option, value in (('eval_episodes', eval_episodes), ('warmup_trials', warmup_trials)):
        if value < 0:
            raise ValueError(f'expected {option} >= 0, got {value}')
    if trial_steps < n_reports:
        raise ValueError(f'expected trial_steps >= n_reports ({n_reports}), got {trial_steps}')
    if sampler not in SAMPLERS:
        raise ValueError(f'expected sampler {" or ".join(SAMPLERS)}, got {sampler!r}')
    if pruner not in PRUNERS:
        raise ValueError(f'expected pruner {", ".join(PRUNERS)}, got {pruner!r}')
    space = search_space(agent, search)
    env_spec(env_id)
    console_logging()  # a script shows the trial lines and the best, as the command does
    if plot:
        check_writable(plot, directory=True)
    name = study or f'{agent_name(agent)}-{env_id}'
    backend, shown = open_storage(storage, name, n_jobs)
    the_study = open_study(backend, name, agent, env_id, space, make_sampler(sampler, warmup_trials),
                           make_pruner(pruner, warmup_trials, trial_steps, n_reports),
                           {'trial_steps': trial_steps, 'eval_episodes': eval_episodes})
    search_run = _Search(the_study, backend, agent, env_id, space, trial_steps, n_reports, eval_episodes, seed)
    logger.info('study %s in %s', name, shown)
    try:
        search_run.run(n_trials, n_jobs)
    finally:
        log_summary(the_study)
        if plot:
            for path in write_plots(the_study, plot):
                logger.info('wrote %s', path)
    return the_study


class _Search:
    """This process's part in a search: claims trials until the study's target is reached."""

    def __init__(self, study: optuna.Study, storage, agent: type, env_id: str, space: SearchSpace,
                 trial_steps: int, n_reports: int, eval_episodes: int, seed: int | None) -> None:
        self.study, self.storage, self.agent, self.env_id, self.space = study, storage, agent, env_id, space
        self.trial_steps, self.n_reports, self.eval_episodes, self.seed = trial_steps, n_reports, eval_episodes, seed
        self.worker = f'{socket.gethostname()}:{os.getpid()}'
        self.heartbeat = isinstance(storage, RDBStorage)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.children: set[subprocess.Popen] = set()
        self.errors: list[BaseException] = []
        self.target = 0

    def run(self, n_trials: int, n_jobs: int) -> None:
        """Run trials in ``n_jobs`` threads (one child process each) until the target is reached."""
        self.fail_abandoned()
        started = self.started()
        # Counted before the target is read: a worker that sees another's trials also sees the
        # target that worker recorded before creating them, so simultaneous starts agree.
        target = self.study.user_attrs.get(TARGET_ATTR)
        if target is None or started >= target:
            target = started + n_trials
            self.study.set_user_attr(TARGET_ATTR, target)
            logger.info('searching %d trials (the study had %d)', n_trials, started)
        else:
            logger.info('joining the search in progress: %d of %d trials started', started, target)
        self.target = target
        # Each thread sets its event when it ends: Thread.join cut short by Ctrl-C can report a
        # running thread as stopped (the bpo-45274 fix releases its lock), so it is not used.
        ended = [threading.Event() for _ in range(n_jobs)]
        try:
            for event in ended:
                threading.Thread(target=self.work, args=(event,), daemon=True).start()
            while not all(event.is_set() for event in ended):
                time.sleep(0.1)
        except KeyboardInterrupt:
            logger.info('Stopping: running trials end as FAIL; completed trials stay in the study')
            self.stop.set()
            for child in list(self.children):
                _kill(child)
            while not all(event.is_set() for event in ended):
                time.sleep(0.1)
            raise
        if self.errors:
            raise self.errors[0]

    def work(self, ended: threading.Event) -> None:
        try:
            while not self.stop.is_set():
                trial = self.claim()
                if trial is None:
                    return
                self.run_trial(trial)
        except BaseException as error:  # re-raised by run() in the main thread
            self.errors.append(error)
            self.stop.set()
        finally:
            ended.set()

    def started(self) -> int:
        return sum(trial.state != TrialState.WAITING for trial in self.study.get_trials(deepcopy=False))

    def fail_abandoned(self) -> None:
        """Fail RUNNING trials whose worker is gone: stale heartbeat, or a dead process on this host."""
        if self.heartbeat:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', optuna.exceptions.ExperimentalWarning)
                fail_stale_trials(self.study)
        host = socket.gethostname()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker_host, _, pid = str(trial.user_attrs.get('worker', '')).rpartition(':')
            if worker_host == host and pid.isdigit() and not _alive(int(pid)):
                try:
                    if self.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                        logger.info('trial %d FAIL: its worker (pid %s) is gone', trial.number, pid)
                except UpdateFinishedTrialError:
                    pass

    def claim(self) -> optuna.Trial | None:
        """A new trial, or None once the target number of trials has started."""
        with self.lock:
            if self.stop.is_set():
                return None
            self.fail_abandoned()
            if self.started() >= self.target:
                return None
            with warnings.catch_warnings():  # heartbeats are recorded here, not by Study.optimize
                warnings.filterwarnings('ignore', 'Heartbeat of storage', UserWarning)
                trial = self.study.ask()
            self.beat(trial)
            earlier = sum(other.state != TrialState.WAITING and other.number < trial.number
                          for other in self.study.get_trials(deepcopy=False))
            if earlier >= self.target:  # another worker took the last one meanwhile
                self.storage.set_trial_state_values(trial._trial_id, TrialState.WAITING)
                return None
            trial.set_user_attr('worker', self.worker)
            return trial

    def beat(self, trial: optuna.Trial) -> None:
        if self.heartbeat:
            self.storage.record_heartbeat(trial._trial_id)

    def run_trial(self, trial: optuna.Trial) -> None:
        start = time.monotonic()
        state, value, note, params = TrialState.FAIL, None, '', {}
        try:
            params = self.space.sample(trial)
            seed = trial.number if self.seed is None else self.seed
            command = train_command(self.agent, self.env_id, {**self.space.fixed, **params}, seed,
                                    self.trial_steps, self.eval_episodes, self.n_reports)
            trial.set_user_attr('command', command)
            spec = dict(agent=f'{self.agent.__module__}:{self.agent.__qualname__}', env_id=self.env_id,
                        hyperparameters={**self.space.fixed, **params, 'seed': seed},
                        trial_steps=self.trial_steps, n_reports=self.n_reports, eval_episodes=self.eval_episodes)
            state, value, note = self.train(trial, spec)
        except BaseException as error:
            note = one_line(error)
            raise
        finally:
            if note:
                trial.set_user_attr('note', note)
            self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
            shown = '' if value is None else f' value {value:.2f}'
            logger.info('trial %d %s%s  %s  (%.0f s)%s', trial.number, state.name, shown,
                        ' '.join(f'{name}={_short(v)}' for name, v in params.items()),
                        time.monotonic() - start, f': {note}' if note else '')

    def train(self, trial: optuna.Trial, spec: dict) -> tuple[TrialState, float | None, str]:
        """Train in a child process, relaying its reports to the trial and the pruner."""
        with tempfile.TemporaryFile() as errors:
            child = subprocess.Popen([sys.executable, '-m', __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=errors, start_new_session=True)
            self.children.add(child)
            try:
                try:
                    child.stdin.write(json.dumps(spec).encode())
                    child.stdin.close()
                except BrokenPipeError:
                    pass
                outcome = self.follow(trial, child)
                if outcome is None and self.stop.is_set():
                    outcome = (TrialState.FAIL, None, 'interrupted')
                elif outcome is None:  # a crash: the last line it wrote that is not native logging
                    errors.seek(0)
                    lines = [line for line in errors.read().decode(errors='replace').splitlines()
                             if line.strip() and not re.match(r'[IWEF]\d{4} |WARNING: All log messages', line)]
                    outcome = (TrialState.FAIL, None, f'trial process exited with status {child.wait()}'
                               + (f': {lines[-1].strip()}' if lines else ''))
                return outcome
            finally:
                _kill(child)
                self.children.discard(child)
                child.stdout.close()

    def follow(self, trial: optuna.Trial, child: subprocess.Popen) -> tuple[TrialState, float | None, str] | None:
        """Read the child's JSON lines until it finishes; None if it ends without saying how."""
        descriptor, pending, value = child.stdout.fileno(), b'', None
        next_beat = time.monotonic() + HEARTBEAT_INTERVAL
        while True:
            if self.stop.is_set():
                return TrialState.FAIL, None, 'interrupted'
            if time.monotonic() >= next_beat:
                self.beat(trial)
                next_beat += HEARTBEAT_INTERVAL
            if not select.select([descriptor], [], [], 0.5)[0]:
                continue
            chunk = os.read(descriptor, 65536)
            if not chunk:
                return None
            *lines, pending = (pending + chunk).split(b'\n')
            for line in lines:
                message = json.loads(line)
                if 'value' in message:
                    value = message['value']
                    trial.report(value, message['step'])
                    if message['step'] < self.trial_steps and trial.should_prune():  # the last one completes
                        return TrialState.PRUNED, value, f'pruned at step {message["step"]}'
                elif 'diverged' in message:
                    return TrialState.PRUNED, value, message['diverged']
                elif 'error' in message:
                    return TrialState.FAIL, None, message['error']
                elif value is None:
                    return TrialState.FAIL, None, f'no episode finished within {self.trial_steps} steps'
                else:
                    return TrialState.COMPLETE, value, ''


def train_command(agent: type, env_id: str, hyperparameters: Mapping[str, Any], seed: int, trial_steps: int,
                  eval_episodes: int = 0, n_reports: int = 1) -> str:
    """The ``xagents train`` command that trains a trial's agent again."""
    flags = hyperparameter_flags(agent)
    words = ['xagents', 'train', agent_name(agent), '--env', env_id]
    for name, value in hyperparameters.items():
        words += flag_words(flags[name].option, value)
    words += ['--seed', str(seed), '--max-steps', str(trial_steps)]
    if eval_episodes:
        words += ['--eval-frequency', str(trial_steps // n_reports), '--eval-episodes', str(eval_episodes)]
    return shlex.join(words)


def log_summary(study: optuna.Study) -> None:
    """Log the study's trial counts, its best trial and the command that trains it."""
    trials = study.get_trials(deepcopy=False)
    counts = collections.Counter(trial.state.name for trial in trials)
    logger.info('study %s: %d trials (%s)', study.study_name, len(trials),
                ', '.join(f'{count} {state}' for state, count in sorted(counts.items())) or 'none')
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if not complete:
        logger.info('no trial has completed yet')
        return
    best = max(complete, key=lambda trial: trial.value)
    logger.info('best trial %d: value %.2f  %s', best.number, best.value,
                ' '.join(f'{name}={_short(value)}' for name, value in best.params.items()))
    logger.info('train it: %s', best.user_attrs.get('command', '(command not recorded)'))


def write_plots(study: optuna.Study, directory: str) -> list[str]:
    """Write optimisation-history, parameter-importance and parallel-coordinate PNGs to ``directory``."""
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as charts

    os.makedirs(directory, exist_ok=True)
    written = []
    for name, draw in (('optimization_history', charts.plot_optimization_history),
                       ('param_importances', charts.plot_param_importances),
                       ('parallel_coordinate', charts.plot_parallel_coordinate)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                axes = draw(study)
        except Exception as error:  # e.g. importances need two complete trials
            logger.warning('%s not drawn: %s', name, one_line(error))
            continue
        figure = np.ravel(axes)[0].figure
        path = os.path.join(directory, f'{name}.png')
        figure.savefig(path, dpi=100, bbox_inches='tight')
        plt.close(figure)
        written.append(path)
    return written


def _short(value: Any) -> str:
    return f'{value:.3g}' if isinstance(value, float) else str(value)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _kill(child: subprocess.Popen) -> None:
    """Kill a trial process and anything it started (it leads its own process group)."""
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    child.wait()


# ------------------------------------------------------------------------- the trial process
class Diverged(Exception):
    """Training produced non-finite losses or weights."""


def train_trial(agent: type | str, env_id: str, hyperparameters: Mapping[str, Any], trial_steps: int,
                n_reports: int, eval_episodes: int) -> Iterator[tuple[int, float]]:
    """Train one trial's agent, built as ``xagents train`` builds it, yielding ``(step, value)``.

    Values come every ``trial_steps / n_reports`` steps, at nominal steps that are the same for
    every trial so the pruner compares like with like: the mean training reward of the last
    ``reward_buffer_size`` episodes, or the mean of ``eval_episodes`` deterministic episodes.
    Reports before any episode has finished are skipped.

    Raises:
        Diverged: A loss or a weight is not finite.
    """
    if isinstance(agent, str):  # 'module:Class', as the parent sends it to a trial's process
        module, _, name = agent.partition(':')
        agent = getattr(importlib.import_module(module), name)
    instance, run = agent.from_env(env_id, **with_named_networks(hyperparameters)), None
    try:
        for report in range(1, n_reports + 1):
            step = trial_steps * report // n_reports
            try:
                if run is None or instance.steps < step:
                    run = instance.fit(max_steps=step, total=True, quiet=True)
            except NonFiniteError as error:  # an update's losses turned non-finite (fit stopped at once)
                raise Diverged(f'non-finite losses after {instance.steps} steps: {error}') from None
            except Exception as error:  # NaN weights surface as errors (e.g. NaN probabilities)
                if _weights_finite(instance):
                    raise
                raise Diverged(f'non-finite weights after {instance.steps} steps ({one_line(error)})') from None
            bad = [name for name, value in run.metrics.items() if not np.isfinite(float(value))]
            if bad or not _weights_finite(instance):
                raise Diverged(f'non-finite {", ".join(bad) or "weights"} after {instance.steps} steps')
            value = instance.evaluate(episodes=eval_episodes).mean if eval_episodes else run.mean_reward
            if np.isfinite(value):
                yield step, float(value)
    finally:
        close_envs(instance.envs)


def _weights_finite(instance) -> bool:
    return all(np.isfinite(weights).all() for model in instance.models.values() for weights in model.get_weights())


def _trial_process() -> None:
    """Entry of a trial's process: a JSON spec on stdin, JSON lines on stdout."""
    channel = os.fdopen(os.dup(1), 'w', buffering=1)
    os.dup2(2, 1)  # whatever else writes to stdout lands in the captured stderr, not the channel
    spec = json.load(sys.stdin)

    def send(**message) -> None:
        channel.write(json.dumps(message) + '\n')

    try:
        for step, value in train_trial(**spec):
            send(step=step, value=value)
        send(done=True)
    except Diverged as error:
        send(diverged=str(error))
    except BrokenPipeError:  # the parent is gone
        raise SystemExit(1)
    except Exception as error:
        send(error=one_line(error))
        raise SystemExit(1)


if __name__ == '__main__':
    _trial_process()

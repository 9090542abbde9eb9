"""``xagents benchmark``: agents x envs x seeds, each a normal ``xagents train`` process, summarised.

Every run trains for its budget with a deterministic evaluation every ``eval_frequency`` steps and
writes a history file; its evaluations, wall time and speed go to ``runs/<agent>-<env>-<seed>.json``,
so a benchmark stopped half-way goes on where it was (finished runs are skipped). The summary is
a table (parquet and Markdown: steps to the target, where a run that missed it counts as its budget so
that the mean is a lower bound unless every seed reached it, and final evaluation, mean and 95% bootstrap
confidence interval over seeds, wall time, env steps/s), learning curves per env (mean and interval
across seeds, against steps and time), an aggregate plot of each agent's interquartile mean of scores
normalised between a uniformly random policy (0) and the target (1) with rliable's stratified bootstrap
interval (Agarwal et al. 2021, https://arxiv.org/abs/2108.13264), and what produced them.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from xagents.storage.atomic import atomic_write
from xagents.storage.readback import damaged, read_json

if TYPE_CHECKING:
    import pandas as pd

# An evaluation's log line: its step, reward and, for envs that report info['is_success'], success rate.
EVAL_LINE = re.compile(r'steps (\d+)\s+eval reward (-?[\d.]+|nan|inf|-inf)[^\n]*?(?:  success ([\d.]+))?$', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Job:
    """One agent on one env: its target score, step budget and evaluation schedule."""

    agent: str
    env: str
    target: float
    steps: int
    eval_frequency: int
    flags: tuple[str, ...] = ()
    max_seeds: int | None = None  # runs too long for a CPU: only the first seeds unless --all-seeds
    metric: str = 'reward'  # what target and evaluations measure: the eval reward, or the eval success rate
    label: str = ''  # tells runs of one agent on one env with other flags apart (dqn+her, dqn)

    @property
    def title(self) -> str:
        """The agent as tables and plots name it: ``dqn``, or with a label ``dqn+her``."""
        return f'{self.agent}+{self.label}' if self.label else self.agent

    @property
    def name(self) -> str:
        return f'{self.title}-{self.env.replace("/", "-").replace(":", "-")}'


OWN = 'xagents.envs.unpreset:Own/'  # the prefix of the defaults suite's ids: tasks that no preset names
# PPO's Atari-sized settings, its generic defaults for discrete actions before they became SB3's for all but
# pictures: the classic Acrobot row and the spaces suite's Taxi and MatchTargets rows were measured with them.
ATARI_PPO = ('--n-steps', '128', '--ppo-epochs', '4', '--mini-batches', '4', '--entropy-coef', '0.01')

SUITES = {
    'classic': [
        Job('ppo', 'CartPole-v1', 475, 200_000, 10_000), Job('a2c', 'CartPole-v1', 475, 300_000, 10_000),
        Job('trpo', 'CartPole-v1', 475, 300_000, 10_000), Job('acer', 'CartPole-v1', 475, 300_000, 10_000),
        Job('dqn', 'CartPole-v1', 475, 150_000, 5_000), Job('sac', 'CartPole-v1', 475, 100_000, 5_000),
        Job('ppo', 'Pendulum-v1', -250, 200_000, 10_000), Job('trpo', 'Pendulum-v1', -250, 200_000, 10_000),
        Job('a2c', 'Pendulum-v1', -250, 600_000, 25_000),
        Job('sac', 'Pendulum-v1', -200, 20_000, 1_000), Job('td3', 'Pendulum-v1', -200, 20_000, 1_000),
        Job('ddpg', 'Pendulum-v1', -200, 20_000, 1_000), Job('tqc', 'Pendulum-v1', -200, 20_000, 1_000),
        Job('crossq', 'Pendulum-v1', -200, 20_000, 1_000),
        Job('ppo', 'Acrobot-v1', -100, 300_000, 10_000, flags=ATARI_PPO),
        Job('dqn', 'Acrobot-v1', -100, 200_000, 10_000),
        Job('dqn', 'MountainCar-v0', -110, 300_000, 10_000),
        Job('qrdqn', 'CartPole-v1', 475, 50_000, 5_000), Job('qrdqn', 'Acrobot-v1', -100, 100_000, 10_000),
        Job('qrdqn', 'MountainCar-v0', -110, 120_000, 10_000),
        Job('sac', 'MountainCarContinuous-v0', 90, 100_000, 5_000),
        Job('td3', 'MountainCarContinuous-v0', 90, 100_000, 5_000),
    ],
    'box2d': [
        Job('ppo', 'LunarLander-v3', 200, 1_000_000, 25_000), Job('a2c', 'LunarLander-v3', 200, 1_000_000, 25_000),
        Job('dqn', 'LunarLander-v3', 200, 300_000, 10_000),
        Job('qrdqn', 'LunarLander-v3', 70, 100_000, 10_000),  # RL Zoo's QR-DQN: 70.2 after 100k steps
        Job('sac', 'LunarLanderContinuous-v3', 200, 300_000, 10_000),
        Job('td3', 'LunarLanderContinuous-v3', 200, 300_000, 10_000),
        Job('ddpg', 'LunarLanderContinuous-v3', 200, 300_000, 10_000),
        Job('crossq', 'LunarLanderContinuous-v3', 200, 300_000, 10_000),
        Job('ppo', 'LunarLanderContinuous-v3', 200, 1_000_000, 25_000),
        Job('sac', 'BipedalWalker-v3', 250, 500_000, 25_000, max_seeds=1),
        Job('td3', 'BipedalWalker-v3', 250, 500_000, 25_000, max_seeds=1),
    ],
    # Targets: RL Zoo's published score after 1M steps (one seed each there), rounded down. A CPU
    # does the first 300k steps of one seed: --seeds 0 --max-steps 300000.
    'mujoco': [
        Job('sac', 'Hopper-v5', 2300, 1_000_000, 20_000), Job('td3', 'Hopper-v5', 3600, 1_000_000, 20_000),
        Job('ppo', 'Hopper-v5', 2400, 1_000_000, 20_000),
        Job('sac', 'Walker2d-v5', 3800, 1_000_000, 20_000), Job('td3', 'Walker2d-v5', 4700, 1_000_000, 20_000),
        Job('ppo', 'Walker2d-v5', 3400, 1_000_000, 20_000),
        Job('sac', 'HalfCheetah-v5', 9500, 1_000_000, 20_000), Job('td3', 'HalfCheetah-v5', 9600, 1_000_000, 20_000),
        Job('ppo', 'HalfCheetah-v5', 5800, 1_000_000, 20_000),
        # TQC: RL Zoo's after 1M (v3), rounded down
        Job('tqc', 'Hopper-v5', 3700, 1_000_000, 20_000), Job('tqc', 'HalfCheetah-v5', 12000, 1_000_000, 20_000),
        Job('tqc', 'Walker2d-v5', 4300, 1_000_000, 20_000),
        # CrossQ: at least SAC's (its paper's curves pass SAC's on each)
        Job('crossq', 'Hopper-v5', 2300, 1_000_000, 20_000), Job('crossq', 'HalfCheetah-v5', 9500, 1_000_000, 20_000),
        Job('crossq', 'Walker2d-v5', 3800, 1_000_000, 20_000),
    ],
    # Pong to 18 within 10M frames (2.5M steps of 4 frames; about an hour a run on a 2-core CPU with --precision
    # bf16); Breakout, and QR-DQN's Pong (RL Zoo's run is at +14.5 after 5M steps), to RL Zoo's score after its 10M
    # steps, rounded down. One seed unless --all-seeds.
    'atari': [
        *(Job(agent, 'PongNoFrameskip-v4', 18, 2_500_000, 100_000, max_seeds=1) for agent in ('ppo', 'a2c', 'dqn')),
        Job('qrdqn', 'PongNoFrameskip-v4', 20, 10_000_000, 250_000, max_seeds=1),
        *(Job(agent, 'BreakoutNoFrameskip-v4', target, 10_000_000, 250_000, max_seeds=1)
          for agent, target in (('ppo', 390), ('a2c', 270), ('dqn', 350), ('qrdqn', 390))),
    ],
    # Spaces beyond Box and Discrete, with the commands of the Results page: Dict observations (MiniGrid's image
    # and direction; needs pip install minigrid), action masks (Taxi's info['action_mask']) and MultiDiscrete
    # actions (a toy env whose optimum is 10).
    'spaces': [
        Job('ppo', 'minigrid:MiniGrid-DoorKey-5x5-v0', 0.9, 150_000, 10_240,
            flags=('--observation-keys', 'image', 'direction', '--n-envs', '8', '--n-steps', '128',
                   '--mini-batches', '16', '--ppo-epochs', '10', '--lr', '2.5e-4', '--lam', '0.95', '--entropy-coef', '0')),
        Job('ppo', 'Taxi-v4', 7, 600_000, 20_000, flags=('--n-envs', '8', *ATARI_PPO)),
        Job('dqn', 'Taxi-v4', 7, 200_000, 10_000,
            flags=('--lr', '1e-3', '--buffer-max-size', '50000', '--buffer-initial-size', '1000',
                   '--buffer-batch-size', '64', '--update-every', '16', '--gradient-steps', '8',
                   '--target-update-interval', '250', '--epsilon-decay-steps', '50000', '--epsilon-end', '0.05')),
        *(Job(agent, 'xagents.envs.toy_envs:MatchTargets-v0', 10, 100_000, 1_000,
              flags=('--env-kwargs', 'action_type=multi_discrete', *flags))
          for agent, flags in (('ppo', ATARI_PPO), ('a2c', ()))),
    ],
    # Memory: classic control with the velocities hidden (RL Zoo's NoVel ids) for recurrent PPO with RL Zoo's
    # ppo_lstm settings (the presets), beside the same PPO without memory, which should not get there.
    'memory': [
        Job('ppo', 'CartPoleNoVel-v1', 475, 100_000, 10_240, flags=('--recurrent', 'lstm'), label='lstm'),
        Job('ppo', 'CartPoleNoVel-v1', 475, 100_000, 10_240),
        Job('ppo', 'PendulumNoVel-v1', -250, 100_000, 8_192, flags=('--recurrent', 'lstm', '--sequence-length', '32'),
            label='lstm'),
        Job('ppo', 'PendulumNoVel-v1', -250, 100_000, 8_192),
    ],
    # Goal envs and hindsight experience replay, judged by the success rate of deterministic evaluations: SAC and TD3
    # with RL Zoo's FetchReach settings (the presets) on a Fetch-like reach, SAC without HER beside them; DQN on the
    # HER paper's bit flipping with 20 bits, with HER and without (the control, which random exploration never
    # brings to a goal).
    'goals': [
        *(Job(agent, 'PointReach-v0', 0.9, 20_000, 1_000, flags=('--her',), metric='success', label='her')
          for agent in ('sac', 'td3')),
        Job('sac', 'PointReach-v0', 0.9, 20_000, 1_000, flags=('--no-her',), metric='success'),
        Job('dqn', 'BitFlipping-v0', 0.9, 30_000, 2_500, flags=('--her', '--env-kwargs', 'n_bits=20'),
            metric='success', label='her'),
        Job('dqn', 'BitFlipping-v0', 0.9, 30_000, 2_500, flags=('--no-her', '--env-kwargs', 'n_bits=20'),
            metric='success'),
    ],
    # Generic defaults: well-known tasks under ids that no preset names (xagents.envs.unpreset's Own/ ids), what
    # an agent meets on a user's own env; every agent family, with no flags but the goal env's --her.
    'defaults': [
        *(Job(agent, f'{OWN}CartPole-v1', 475, steps, 10_000) for agent, steps in (
            ('ppo', 200_000), ('a2c', 300_000), ('trpo', 300_000), ('acer', 300_000), ('dqn', 150_000),
            ('qrdqn', 150_000), ('sac', 100_000))),
        *(Job(agent, f'{OWN}Pendulum-v1', -250, 200_000, 10_000) for agent in ('ppo', 'trpo')),
        *(Job(agent, f'{OWN}Pendulum-v1', -200, 20_000, 1_000) for agent in ('sac', 'td3', 'ddpg', 'tqc', 'crossq')),
        *(Job(agent, f'{OWN}Acrobot-v1', -100, 300_000, 10_000) for agent in ('ppo', 'dqn')),
        *(Job(agent, f'{OWN}LunarLander-v3', 200, steps, 25_000) for agent, steps in (
            ('ppo', 1_000_000), ('dqn', 300_000))),
        *(Job(agent, f'{OWN}LunarLanderContinuous-v3', 200, 300_000, 10_000) for agent in ('sac', 'td3')),
        Job('ppo', f'{OWN}DoorKey-5x5-v0', 0.9, 150_000, 10_240),
        Job('ppo', f'{OWN}Taxi-v4', 7, 600_000, 20_000), Job('dqn', f'{OWN}Taxi-v4', 7, 200_000, 10_000),
        *(Job(agent, f'{OWN}PointReach-v0', 0.9, 20_000, 1_000, flags=('--her',), metric='success', label='her')
          for agent in ('sac', 'td3')),
    ],
}


# ------------------------------------------------------------------------------- statistics
def interquartile_mean(scores: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Mean of ``scores`` without their lowest and highest quarter along ``axis`` (all of them if None):
    rliable's IQM, ``scipy.stats.trim_mean(scores, 0.25)``, robust to outlying runs and less noisy than a median."""
    scores = np.asarray(scores, np.float64)
    if axis is None:
        scores, axis = scores.ravel(), 0
    count = scores.shape[axis]
    cut = int(0.25 * count)
    middle = np.partition(scores, (cut, count - cut - 1), axis)  # as scipy does: no full sort
    return np.take(middle, range(cut, count - cut), axis).mean(axis)


def bootstrap_interval(scores: np.ndarray, statistic=np.mean, confidence: float = 0.95, resamples: int = 50_000,
                       seed: int = 0) -> tuple[float, float]:
    """Stratified percentile bootstrap confidence interval of ``statistic`` over ``scores``, as rliable's
    ``get_interval_estimates`` computes it (Agarwal et al. 2021, https://arxiv.org/abs/2108.13264).

    Each resample draws, with replacement, as many runs as each task has from that task's own runs (so a
    task solved on every seed and one failed on every seed give an interval around their average, not one
    that spans both); ``statistic`` then reduces all runs x tasks of the resample at once.

    Args:
        scores: (runs, tasks) matrix, every task with the same runs (seeds); 1-D: one task's runs.
        statistic: a NumPy-style reduction taking ``axis=`` (``np.mean``, ``interquartile_mean``).
        confidence: the interval's coverage.
        resamples: bootstrap resamples (rliable's default: 50,000).
        seed: seeds the resampling, so a summary is the same each time it is written.
    """
    scores = np.asarray(scores, np.float64)
    scores = scores[:, None] if scores.ndim == 1 else scores
    if scores.size == 0:
        return (np.nan, np.nan)
    runs, tasks = scores.shape
    rows = np.random.default_rng(seed).integers(0, runs, (resamples, runs, tasks))
    estimates = statistic(scores[rows, np.arange(tasks)].reshape(resamples, -1), axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return float(low), float(high)


# ---------------------------------------------------------------------------------- running
def run_path(output: str, job: Job, seed: int) -> str:
    return os.path.join(output, 'runs', f'{job.name}-{seed}.json')


# A finished run's record (what run_one writes): its fields and what each may be (see readback.JSON_KINDS).
RUN_FIELDS = {'agent': ('a string',), 'env': ('a string',), 'seed': ('an integer',), 'target': ('a number',),
              'budget': ('an integer',), 'command': ('a string',), 'wall_seconds': ('a number',),
              'steps': ('an integer',), 'steps_per_second': ('a number',), 'evaluations': ('a list',),
              'steps_to_target': ('an integer', 'null'), 'final_eval': ('a number', 'null')}


def read_run(path: str) -> dict:
    """The record of a finished run, checked to be one :func:`run_one` writes.

    Raises:
        ValueError: the file is damaged: not JSON, a field missing or of another kind.
    """
    fix = 'remove it to run that seed again'
    record = read_json(path, RUN_FIELDS, fix)
    if not all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, (int, float)) for x in pair)
               for pair in record['evaluations']):
        raise damaged(path, 'expected "evaluations" to list [step, reward] pairs', fix)
    return record


def backend_name() -> str:
    """The Keras backend the runs train on, as Keras picks it: ``--backend`` sets ``KERAS_BACKEND`` before anything
    runs, else a ``keras.json`` may name one."""
    from xagents.utils.console import chosen_backend

    return chosen_backend()[0]


def command_of(job: Job, seed: int, output: str) -> list[str]:
    """The ``xagents train`` command of one run (printed in the results, runnable by hand), on the benchmark's
    backend (named unless it is TensorFlow, the default)."""
    history = os.path.join(output, 'runs', f'{job.name}-{seed}.parquet')
    backend = [] if backend_name() == 'tensorflow' else ['--backend', backend_name()]
    return ['xagents', 'train', job.agent, '--env', job.env, '--seed', str(seed), '--max-steps', str(job.steps),
            '--eval-frequency', str(job.eval_frequency), '--eval-episodes', '10', '--history-checkpoint', history,
            '--log-frequency', '1000000', *job.flags, *backend]


def run_one(job: Job, seed: int, output: str) -> dict:
    """Train one run in its own process; record its evaluations, time and speed in its JSON file."""
    command = command_of(job, seed, output)
    history = command[command.index('--history-checkpoint') + 1]
    if os.path.exists(history):  # an interrupted earlier attempt: start the run again
        os.remove(history)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, '-m', 'xagents', *command[1:]], capture_output=True, text=True,
                            env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f'{" ".join(command)} failed ({result.returncode}): '
                           f'{(result.stderr.strip().splitlines() or ["no output"])[-1]}')
    evaluations = [(int(step), float(reward if job.metric == 'reward' else success))
                   for step, reward, success in EVAL_LINE.findall(result.stdout) if job.metric == 'reward' or success]
    steps = max([job.steps] + [step for step, _ in evaluations])  # a last round may pass the budget
    reached = [step for step, reward in evaluations if reward >= job.target]
    record = {'agent': job.title, 'env': job.env, 'metric': job.metric, 'seed': seed, 'target': job.target,
              'budget': job.steps,
              'command': ' '.join(command), 'wall_seconds': wall, 'steps': steps, 'steps_per_second': steps / wall,
              'evaluations': evaluations, 'steps_to_target': reached[0] if reached else None,
              'final_eval': evaluations[-1][1] if evaluations else None}
    with atomic_write(run_path(output, job, seed)) as file:
        file.write(json.dumps(record).encode())
    return record


def _settings(command: str) -> str:
    """A run's command without its history path (which names the output directory, wherever it is now)."""
    return re.sub(r' --history-checkpoint \S+', '', command)


def check_same_settings(job: Job, seed: int, output: str) -> None:
    """Refuse to keep a finished run made with other settings (budget, evaluations, flags, target) than
    ``job``'s: a benchmark resumed with other flags would table it as if it were this job's."""
    path = run_path(output, job, seed)
    record = read_run(path)
    wanted = ' '.join(command_of(job, seed, output))
    if _settings(record['command']) != _settings(wanted) or record['target'] != job.target:
        raise ValueError(f'{path} was run as `{_settings(record["command"])}` (target {record["target"]:g}), not '
                         f'`{_settings(wanted)}` (target {job.target:g}): use another --output, or remove that file '
                         'to run it again')


def seeds_of(job: Job, seeds: list[int]) -> list[int]:
    """The seeds ``job`` runs: all of ``seeds``, or their first ``job.max_seeds``."""
    return seeds[:job.max_seeds] if job.max_seeds else seeds


def run_benchmark(jobs: list[Job], seeds: list[int], output: str, workers: int = 1, log=print,
                  run_pending: bool = True) -> list[dict]:
    """Run every job x seed not finished yet (``workers`` at a time; none unless ``run_pending``);
    return the finished runs' records."""
    made = [path for path in (output, os.path.join(output, 'runs')) if run_pending and not os.path.isdir(path)]
    if run_pending:
        os.makedirs(os.path.join(output, 'runs'), exist_ok=True)
    try:
        return _run_pending(jobs, seeds, output, workers, log, run_pending)
    finally:  # a benchmark that finished no run (each failed) leaves no empty folders
        for path in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(path)


def _run_pending(jobs: list[Job], seeds: list[int], output: str, workers: int, log, run_pending: bool) -> list[dict]:
    """:func:`run_benchmark`'s runs and records, once its folders exist."""
    runs = [(job, seed) for job in jobs for seed in seeds_of(job, seeds)]
    pending = [(job, seed) for job, seed in runs if not os.path.exists(run_path(output, job, seed))]
    done = len(runs) - len(pending)
    if not run_pending:
        log(f'{done} finished runs summarised, {len(pending)} not run')
        pending = []
    else:
        for job, seed in runs:
            if (job, seed) not in pending:
                check_same_settings(job, seed, output)
    if run_pending and done:
        log(f'{done} finished runs kept, {len(pending)} to run')
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_one, job, seed, output): (job, seed) for job, seed in pending}
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            log(f'{record["agent"]} {record["env"]} seed {record["seed"]}: final eval {record["final_eval"]}, '
                f'target {"reached at " + format(record["steps_to_target"], ",") if record["steps_to_target"] else "missed"}, '
                f'{record["wall_seconds"]:.0f} s')
    records = []
    for job, seed in runs:
        if os.path.exists(run_path(output, job, seed)):
            records.append(read_run(run_path(output, job, seed)))
    return records


# -------------------------------------------------------------------------------- summaries
def summary_table(records: list[dict]):
    """One row per agent and env: the seeds' statistics with 95% bootstrap intervals.

    A run that missed the target counts as reaching it at the budget: its true steps to target are more,
    so unless every seed reached the target, ``steps_to_target_mean`` is a lower bound and
    ``steps_to_target_ci`` is NaN (the seeds that reached it alone would understate the mean and its
    spread)."""
    import pandas as pd

    rows = []
    frame = pd.DataFrame([{'metric': metric_of(record), **record} for record in records])
    for (agent, env), runs in frame.groupby(['agent', 'env'], sort=False):
        reached = runs['steps_to_target'].notna()
        steps = runs['steps_to_target'].astype(np.float64).fillna(runs['budget']).to_numpy(np.float64)
        finals = runs['final_eval'].dropna().to_numpy(np.float64)
        rows.append({
            'agent': agent, 'env': env, 'metric': runs['metric'].iloc[0], 'target': runs['target'].iloc[0],
            'budget': int(runs['budget'].iloc[0]),
            'seeds': len(runs), 'reached': int(reached.sum()),
            'steps_to_target_mean': float(steps.mean()),
            'steps_to_target_ci': bootstrap_interval(steps) if reached.all() else (np.nan, np.nan),
            'final_eval_mean': float(finals.mean()) if len(finals) else np.nan,
            'final_eval_ci': bootstrap_interval(finals),
            'wall_seconds_mean': float(runs['wall_seconds'].mean()),
            'steps_per_second_mean': float(runs['steps_per_second'].mean()),
            'seeds_list': ' '.join(map(str, sorted(runs['seed']))), 'command': runs['command'].iloc[0],
        })
    return pd.DataFrame(rows)


def markdown(table) -> str:
    """The table as the README shows it, then each row's command."""
    lines = ['| agent | env | target | reached | steps to target (95% CI; ≥: missed runs count as their budget) '
             '| final eval (95% CI) | wall | env steps/s | seeds |', '|---|---|---|---|---|---|---|---|---|']
    for row in table.itertuples():
        low, high = row.steps_to_target_ci
        steps = (f'{row.steps_to_target_mean:,.0f} ({low:,.0f}–{high:,.0f})' if row.reached == row.seeds
                 else f'≥ {row.steps_to_target_mean:,.0f}')
        digits = 2 if abs(row.target) < 5 else 1  # MiniGrid's 0.96 is not 1.0
        final = '—' if np.isnan(row.final_eval_mean) else (
            f'{row.final_eval_mean:.{digits}f} ({row.final_eval_ci[0]:.{digits}f}–{row.final_eval_ci[1]:.{digits}f})')
        target = f'{"success " if row.metric == "success" else ""}{row.target:g} within {row.budget:,}'
        lines.append(f'| {row.agent} | {row.env} | {target} | {row.reached}/{row.seeds} '
                     f'| {steps} | {final} | {row.wall_seconds_mean:.0f} s | {row.steps_per_second_mean:,.0f} '
                     f'| {row.seeds_list} |')
    lines += ['', 'Each row runs, once per seed:', '']
    for row in table.itertuples():
        command = re.sub(r'--seed \d+', '--seed SEED', row.command)
        command = re.sub(r'--history-checkpoint \S+', f'--history-checkpoint {row.agent}-{row.env}-SEED.parquet', command)
        lines.append(f'- `{command}`')
    return '\n'.join(lines) + '\n'


def plot_curves(records: list[dict], path: str) -> None:
    """Evaluation reward (or success rate) against steps and against time, per env: each agent's mean and 95%
    interval."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(record['env'] for record in records))
    figure, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for agent in dict.fromkeys(record['agent'] for record in records if record['env'] == env):
            runs = [record for record in records if record['env'] == env and record['agent'] == agent]
            steps = np.array(sorted({step for record in runs for step, _ in record['evaluations']}))
            if not len(steps):
                continue
            curves = np.array([np.interp(steps, *zip(*record['evaluations'])) for record in runs if record['evaluations']])
            mean = curves.mean(0)
            low, high = np.transpose([bootstrap_interval(column, resamples=2000) for column in curves.T])
            seconds = steps / np.mean([record['steps_per_second'] for record in runs])
            for axis, x in zip(axes[row], (steps, seconds)):
                axis.plot(x, mean, marker='.', label=agent)
                axis.fill_between(x, low, high, alpha=0.2)
        metric = next(metric_of(record) for record in records if record['env'] == env)
        axes[row][0].set(title=f'{env}: eval {metric}', xlabel='env steps')
        axes[row][1].set(title=f'{env}: eval {metric}', xlabel='seconds (mean speed)')
        axes[row][0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def metric_of(record: dict) -> str:
    """What a run's evaluations measure (runs recorded before success rates were: the reward)."""
    return record.get('metric', 'reward')


def random_score(env_id: str, episodes: int = 10, seed: int = 0, metric: str = 'reward') -> float:
    """Mean return (or success rate) of a uniformly random policy on ``env_id`` (made as agents get it): a
    normalised score's 0."""
    from xagents.envs.creation import make_env

    env, returns = make_env(env_id), []
    env.action_space.seed(seed)
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        while True:
            *_, terminated, truncated, info = env.step(env.action_space.sample())
            if 'episode' in info:
                returns.append(float(info['episode']['r']) if metric == 'reward' else float(info.get('is_success', 0)))
                break
            if terminated or truncated:  # a lost life: the game goes on
                env.reset()
    env.close()
    return float(np.mean(returns))


def normalized_scores(records: list[dict], randoms: dict[str, float]) -> dict[str, pd.DataFrame]:
    """Each agent's final evaluations on a scale from a random policy (0) to the target (1), as a
    DataFrame of seeds (rows) x envs (columns): rliable's runs x tasks matrix.

    The matrix keeps only the seeds that finished with an evaluation on every env of the agent (a suite
    runs some envs on fewer seeds): a stratified bootstrap resamples each env's runs, and its IQM weighs
    every env alike only when each has the same runs."""
    import pandas as pd

    frame = pd.DataFrame([{'agent': record['agent'], 'seed': record['seed'], 'env': record['env'],
                           'score': (record['final_eval'] - randoms[record['env']])
                           / (record['target'] - randoms[record['env']])}
                          for record in records if record['final_eval'] is not None])
    return {agent: runs.pivot(index='seed', columns='env', values='score').dropna()
            for agent, runs in frame.groupby('agent', sort=False)} if len(frame) else {}


def plot_aggregate(records: list[dict], randoms: dict[str, float], path: str) -> None:
    """Interquartile mean of each agent's normalised final evaluations over seeds x envs, with its 95%
    stratified bootstrap interval (rliable's ``get_interval_estimates``)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    scores = normalized_scores(records, randoms)
    agents = list(scores)
    figure, axis = plt.subplots(figsize=(6, 0.8 + 0.5 * len(agents)))
    labels = []
    for index, agent in enumerate(agents):
        seeds, envs = scores[agent].shape
        labels.append(f'{agent} ({seeds} seed{"s" * (seeds != 1)} × {envs} env{"s" * (envs != 1)})')
        if seeds:
            iqm = interquartile_mean(scores[agent].to_numpy())
            low, high = bootstrap_interval(scores[agent].to_numpy(), interquartile_mean)
            axis.errorbar(iqm, index, xerr=[[iqm - low], [high - iqm]], fmt='o', capsize=4)
    axis.axvline(1.0, color='grey', linestyle=':')
    axis.set(yticks=range(len(agents)), yticklabels=labels,
             xlabel='IQM of final eval, 0 = random policy, 1 = target\n(95% stratified bootstrap CI)')
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def machine() -> dict:
    """What produced the results: the backend, versions, the machine, the command line."""
    versions = {}
    for package in ('xagents', 'keras', 'tensorflow', 'jax', 'torch', 'gymnasium', 'numpy', 'ale-py', 'box2d'):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {'backend': backend_name(), 'versions': versions, 'python': platform.python_version(),
            'platform': platform.platform(),
            'processor': platform.processor() or platform.machine(), 'cpus': os.cpu_count(),
            'command': ' '.join(['xagents', *sys.argv[1:]])}


def write_summary(records: list[dict], output: str, seeds: list[int]) -> str:
    """Write results.parquet, results.md, curves.png, aggregate.png and machine.json; return the Markdown."""
    table = summary_table(records)
    stored = table.copy()
    for column in ('steps_to_target_ci', 'final_eval_ci'):
        stored[column] = stored[column].map(list)
    with atomic_write(os.path.join(output, 'results.parquet')) as file:
        stored.to_parquet(file)
    text = markdown(table)
    with atomic_write(os.path.join(output, 'results.md')) as file:
        file.write(text.encode())
    plot_curves(records, os.path.join(output, 'curves.png'))
    randoms = {env: random_score(env, metric=metric)
               for env, metric in dict.fromkeys((record['env'], metric_of(record)) for record in records)}
    plot_aggregate(records, randoms, os.path.join(output, 'aggregate.png'))
    with atomic_write(os.path.join(output, 'machine.json')) as file:
        file.write(json.dumps({**machine(), 'seeds': seeds, 'random_scores': randoms}, indent=1).encode())
    return text

"""The benchmark machinery on a tiny budget: runs, resumption, the table, the plots and the statistics."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from xagents.benchmark import SUITES, Job, bootstrap_interval, interquartile_mean, run_benchmark


def test_a_benchmark_runs_every_seed_in_parallel_summarises_and_resumes(workdir, xagents_cli):
    argv = ('benchmark', '--agents', 'ppo', '--envs', 'CartPole-v1', '--target', '15', '--seeds', '0', '1',
            '--max-steps', '1024', '--eval-frequency', '256', '--jobs', '2', '--output', 'out')
    status, out, err = xagents_cli(*argv)
    assert status == 0, err
    runs = [json.load(open(f'out/runs/ppo-CartPole-v1-{seed}.json')) for seed in (0, 1)]
    for run in runs:
        assert run['steps'] >= 1024 and len(run['evaluations']) >= 3 and run['wall_seconds'] > 0
        assert run['final_eval'] == run['evaluations'][-1][1]
        reached = [step for step, reward in run['evaluations'] if reward >= 15]
        assert run['steps_to_target'] == (reached[0] if reached else None)
        assert run['command'].startswith('xagents train ppo --env CartPole-v1 --seed ')
        assert len(pd.read_parquet(run['command'].split('--history-checkpoint ')[1].split()[0])) > 0
    table = pd.read_parquet('out/results.parquet')
    assert len(table) == 1 and table['seeds'].iloc[0] == 2
    assert table['final_eval_mean'].iloc[0] == pytest.approx(np.mean([run['final_eval'] for run in runs]))
    assert table['reached'].iloc[0] == sum(run['steps_to_target'] is not None for run in runs)
    results = open('out/results.md').read()
    assert '| ppo | CartPole-v1 | 15 within 1,024 |' in results and results.count('| 0 1 |') == 1
    assert ('- `xagents train ppo --env CartPole-v1 --seed SEED --max-steps 1024 --eval-frequency 256 --eval-episodes 10 '
            '--history-checkpoint ppo-CartPole-v1-SEED.parquet') in results
    for name in ('curves.png', 'aggregate.png'):
        assert os.path.getsize(f'out/{name}') > 5000
    machine = json.load(open('out/machine.json'))
    assert machine['seeds'] == [0, 1] and machine['versions']['tensorflow'] and machine['cpus'] >= 1

    status, out, err = xagents_cli('benchmark', '--agents', 'ppo', 'a2c', '--envs', 'CartPole-v1', '--target', '15',
                                   '--seeds', '0', '1', '--max-steps', '1024', '--output', 'out', '--summarize-only')
    assert status == 0 and '2 finished runs summarised, 2 not run' in out, err
    assert not os.path.exists('out/runs/a2c-CartPole-v1-0.json') and len(pd.read_parquet('out/results.parquet')) == 1

    before = {seed: os.path.getmtime(f'out/runs/ppo-CartPole-v1-{seed}.json') for seed in (0, 1)}
    os.remove('out/runs/ppo-CartPole-v1-1.json')
    status, out, err = xagents_cli(*argv)
    assert status == 0 and '1 finished runs kept, 1 to run' in out, err
    assert os.path.getmtime('out/runs/ppo-CartPole-v1-0.json') == before[0]
    assert json.load(open('out/runs/ppo-CartPole-v1-1.json'))['evaluations'] == runs[1]['evaluations']  # seeded

    # Resumed with another budget or target, the finished runs are not this benchmark's: refused, kept.
    kept = {seed: open(f'out/runs/ppo-CartPole-v1-{seed}.json').read() for seed in (0, 1)}
    for changed in (('--max-steps', '512'), ('--target', '20')):  # argparse: the last one given wins
        status, _, err = xagents_cli(*argv, *changed)
        assert status == 2 and 'was run as `xagents train ppo --env CartPole-v1 --seed 0' in err, err
        assert err.count('\n') == 1 and 'use another --output, or remove that file' in err
    assert {seed: open(f'out/runs/ppo-CartPole-v1-{seed}.json').read() for seed in (0, 1)} == kept


def test_a_job_limited_to_fewer_seeds_runs_only_the_first(workdir):
    short = Job('ppo', 'CartPole-v1', 15, 256, 128, max_seeds=1)
    records = run_benchmark([short], [3, 4], 'out', log=lambda line: None)
    assert [record['seed'] for record in records] == [3]
    assert [name for name in os.listdir('out/runs') if name.endswith('.json')] == ['ppo-CartPole-v1-3.json']
    assert {job.env for jobs in SUITES.values() for job in jobs if job.max_seeds} >= {'BipedalWalker-v3'}


def test_agents_and_envs_pick_runs_of_a_suite_with_its_targets(workdir, xagents_cli):
    status, _, err = xagents_cli('benchmark', '--suite', 'classic', '--agents', 'ppo', '--envs', 'Acrobot-v1',
                                 '--seeds', '0', '--max-steps', '512', '--output', 'out')
    assert status == 0, err
    assert sorted(name for name in os.listdir('out/runs') if name.endswith('.json')) == ['ppo-Acrobot-v1-0.json']
    assert json.load(open('out/runs/ppo-Acrobot-v1-0.json'))['target'] == -100


def test_the_atari_suite_trains_pong_on_its_preset_and_scores_whole_games(workdir, xagents_cli):
    status, _, err = xagents_cli('benchmark', '--suite', 'atari', '--agents', 'ppo', '--envs', 'PongNoFrameskip-v4',
                                 '--seeds', '0', '1', '--max-steps', '1024', '--eval-frequency', '1024', '--output', 'out')
    assert status == 0, err
    assert sorted(name for name in os.listdir('out/runs') if name.endswith('.json')) == ['ppo-PongNoFrameskip-v4-0.json']
    run = json.load(open('out/runs/ppo-PongNoFrameskip-v4-0.json'))
    assert run['target'] == 18 and [step for step, _ in run['evaluations']] == [1024]
    # A game ends when a side has 21 points: an untrained policy loses by 15 or more, a random one by
    # ~20.7 (Mnih et al. 2015); games cut short (a step cap, a learner's terminal) would score higher.
    assert -21 <= run['final_eval'] <= -15
    assert -21 <= json.load(open('out/machine.json'))['random_scores']['PongNoFrameskip-v4'] <= -19


@pytest.mark.parametrize('argv, message', [
    (['--suite', 'nope'], "argument --suite: invalid choice: 'nope'"),
    (['--seeds', '0'], 'expected --suite, or --agents with --envs and --target'),
    (['--suite', 'classic', '--target', '1'], 'suite classic sets its own targets: drop --target'),
    (['--suite', 'mujoco', '--agents', 'dqn'], 'suite mujoco has no run of dqn on any env'),
    (['--suite', 'classic', '--summarize-only', '--output', 'empty'], 'no finished run of these in empty'),
    (['--agents', 'ppo', '--envs', 'CartPole-v1'], '--agents needs --envs and --target'),
    (['--suite', 'classic', '--jobs', '0'], 'expected --jobs >= 1, got 0'),
])
def test_bad_benchmark_flags_are_one_line_status_2(workdir, xagents_cli, argv, message):
    status, _, err = xagents_cli('benchmark', *argv)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists('benchmark') and not os.path.exists('empty')


def test_a_failing_run_stops_the_benchmark_with_one_line(workdir, xagents_cli):
    status, _, err = xagents_cli('benchmark', '--agents', 'dqn', '--envs', 'Pendulum-v1', '--target', '0',
                                 '--seeds', '0', '--max-steps', '100', '--output', 'out')
    assert status == 1 and 'DQN supports Discrete action spaces' in err and len(err.strip().splitlines()) == 1


def test_bootstrap_interval_agrees_with_scipy():
    scipy_stats = pytest.importorskip('scipy.stats')
    values = np.random.default_rng(3).normal(10.0, 2.0, 20)
    low, high = bootstrap_interval(values)
    theirs = scipy_stats.bootstrap((values,), np.mean, method='percentile', n_resamples=10_000,
                                   random_state=0).confidence_interval
    assert low == pytest.approx(theirs.low, abs=0.15) and high == pytest.approx(theirs.high, abs=0.15)
    assert bootstrap_interval(np.full(5, 7.0)) == (7.0, 7.0)


@pytest.mark.parametrize('n', [4, 10, 13])
def test_interquartile_mean_is_rliables_trimmed_mean(n):
    scipy_stats = pytest.importorskip('scipy.stats')
    values = np.random.default_rng(n).normal(size=n) * 10
    assert interquartile_mean(values) == pytest.approx(scipy_stats.trim_mean(values, 0.25))


def test_scores_are_normalised_from_a_random_policy_to_the_target():
    from xagents.benchmark import normalized_scores, random_score

    randoms = {'CartPole-v1': random_score('CartPole-v1')}
    assert 10 < randoms['CartPole-v1'] < 40  # a random CartPole episode lasts ~22 steps
    records = [{'agent': 'ppo', 'env': 'CartPole-v1', 'target': 475, 'final_eval': value}
               for value in (475, randoms['CartPole-v1'], None)]
    np.testing.assert_allclose(normalized_scores(records, randoms)['ppo'], [1.0, 0.0])

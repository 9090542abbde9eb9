"""The benchmark machinery on a tiny budget: runs, resumption, the table, the plots and the statistics."""
from __future__ import annotations

import json
import os

import keras
import numpy as np
import pandas as pd
import pytest

from xagents.app.benchmark import (OWN, SUITES, Job, bootstrap_interval, interquartile_mean, markdown, normalized_scores,
                               random_score, run_benchmark, summary_table)


@pytest.mark.backends
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
    assert machine['seeds'] == [0, 1] and machine['versions']['keras'] and machine['cpus'] >= 1
    # The runs trained on the backend this test runs on, and their commands say so where it is not the default.
    backend = keras.backend.backend()
    assert machine['backend'] == backend and machine['versions'][backend]
    assert all(run['command'].endswith(f' --backend {backend}') == (backend != 'tensorflow') for run in runs)

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
    assert not os.path.exists('out')  # no run finished: no empty folders left behind


def test_bootstrap_interval_agrees_with_scipy():
    scipy_stats = pytest.importorskip('scipy.stats')
    values = np.random.default_rng(3).normal(10.0, 2.0, 20)
    low, high = bootstrap_interval(values)
    theirs = scipy_stats.bootstrap((values,), np.mean, method='percentile', n_resamples=10_000,
                                   random_state=0).confidence_interval
    assert low == pytest.approx(theirs.low, abs=0.15) and high == pytest.approx(theirs.high, abs=0.15)
    assert bootstrap_interval(np.full(5, 7.0)) == (7.0, 7.0)


@pytest.mark.parametrize('shape', [(4,), (10,), (13,), (3, 5), (5, 2)])
def test_interquartile_mean_is_rliables_trimmed_mean(shape):
    scipy_stats = pytest.importorskip('scipy.stats')
    scores = np.random.default_rng(len(shape) * 10 + shape[0]).normal(size=shape) * 10
    assert interquartile_mean(scores) == pytest.approx(scipy_stats.trim_mean(scores, 0.25, axis=None))
    batch = np.random.default_rng(1).normal(size=(7, scores.size))
    np.testing.assert_allclose(interquartile_mean(batch, axis=1), scipy_stats.trim_mean(batch, 0.25, axis=1))


def test_scores_are_normalised_from_a_random_policy_to_the_target():
    randoms = {'CartPole-v1': random_score('CartPole-v1')}
    assert 10 < randoms['CartPole-v1'] < 40  # a random CartPole episode lasts ~22 steps
    records = [{'agent': 'ppo', 'env': 'CartPole-v1', 'seed': seed, 'target': 475, 'final_eval': value}
               for seed, value in enumerate((475, randoms['CartPole-v1'], None))]
    np.testing.assert_allclose(normalized_scores(records, randoms)['ppo'].to_numpy(), [[1.0], [0.0]])


def finals(agent: str, scores: dict[str, list]) -> list[dict]:
    """Records of ``agent`` whose final evaluations are ``scores[env]`` (seed by seed, None: no evaluation);
    a random policy scores 0 and the target is 1, so the normalised scores are the finals themselves."""
    return [{'agent': agent, 'env': env, 'seed': seed, 'target': 1.0, 'final_eval': final}
            for env, values in scores.items() for seed, final in enumerate(values)]


def test_the_aggregate_interval_resamples_runs_within_each_env_as_rliable_does():
    # One env solved on all 5 seeds, one failed on all: the IQM is ~0.5 and, the seeds being consistent,
    # certain; pooling the 10 runs into one sample to resample made it [0.04, 0.98].
    solved, failed = 1 + np.random.default_rng(5).normal(0, 0.05, 5), np.random.default_rng(6).normal(0, 0.05, 5)
    records = finals('ppo', {'Solved-v0': solved.round(4), 'Failed-v0': failed.round(4)})
    scores = np.asarray(normalized_scores(records, {'Solved-v0': 0.0, 'Failed-v0': 0.0})['ppo'])
    low, high = bootstrap_interval(scores, interquartile_mean)
    # rliable 1.2: get_interval_estimates({'ppo': scores}, lambda x: np.array([metrics.aggregate_iqm(x)])) over
    # ten seeds of np.random gives [0.47172, 0.53958] (sd 0.0002, 0.0005); resampling whole seeds (rows)
    # rather than each env's runs apart would give [0.4798, 0.5320].
    assert low == pytest.approx(0.47172, abs=0.002) and high == pytest.approx(0.53958, abs=0.002)
    assert interquartile_mean(scores) == pytest.approx(0.51225) and scores.shape == (5, 2)


def test_each_resample_draws_as_many_runs_from_each_env_as_it_has():
    scores = 10 * np.arange(4) + np.random.default_rng(0).uniform(size=(3, 4))  # env j's runs lie in [10j, 10j + 1)
    for env in range(4):
        runs_of_env = lambda draws, axis: ((draws >= 10 * env) & (draws < 10 * env + 1)).sum(axis)  # noqa: E731
        assert bootstrap_interval(scores, runs_of_env, resamples=1000) == (3, 3)


def test_the_aggregate_keeps_the_seeds_every_env_finished():
    records = finals('sac', {'LunarLanderContinuous-v3': [0.9, 1.1, 1.0], 'BipedalWalker-v3': [0.5]})
    records += finals('td3', {'Pendulum-v1': [1.0, None]})
    scores = normalized_scores(records, {'LunarLanderContinuous-v3': 0, 'BipedalWalker-v3': 0, 'Pendulum-v1': 0})
    assert list(scores['sac'].index) == [0] and sorted(scores['sac'].columns) == ['BipedalWalker-v3',
                                                                                  'LunarLanderContinuous-v3']
    np.testing.assert_allclose(scores['sac'].loc[0, ['LunarLanderContinuous-v3', 'BipedalWalker-v3']], [0.9, 0.5])
    assert list(scores['td3'].index) == [0]


def runs(steps_to_target: list, budget: int = 200_000) -> list[dict]:
    """Finished runs' records of PPO on CartPole-v1, one a seed, reaching the target at ``steps_to_target``
    (their last round of training passed the budget by 1,000 steps)."""
    return [{'agent': 'ppo', 'env': 'CartPole-v1', 'seed': seed, 'target': 475, 'budget': budget, 'steps': budget + 1000,
             'steps_to_target': steps, 'final_eval': 500.0 if steps else 100.0, 'wall_seconds': 10.0,
             'steps_per_second': budget / 10, 'command': 'xagents train ppo --env CartPole-v1 --seed 0'}
            for seed, steps in enumerate(steps_to_target)]


def test_runs_that_miss_the_target_count_as_their_budget_and_make_the_steps_a_lower_bound():
    table = summary_table(runs([40_000, None, None, None, None]))
    assert table['reached'].iloc[0] == 1
    assert table['steps_to_target_mean'].iloc[0] == (40_000 + 4 * 200_000) / 5
    assert np.isnan(table['steps_to_target_ci'].iloc[0]).all()
    text = markdown(table)
    assert '| 1/5 | ≥ 168,000 | 180.0 (' in text and '≥: missed runs count as their budget' in text
    assert '| 0/2 | ≥ 200,000 |' in markdown(summary_table(runs([None, None])))


def test_steps_to_target_has_its_interval_when_every_seed_reached_it():
    table = summary_table(runs([40_000, 60_000, 50_000]))
    assert table['steps_to_target_mean'].iloc[0] == 50_000
    low, high = table['steps_to_target_ci'].iloc[0]
    assert 40_000 <= low < 50_000 < high <= 60_000
    assert f'| 3/3 | 50,000 ({low:,.0f}–{high:,.0f}) |' in markdown(table)


@pytest.mark.parametrize('job', SUITES['spaces'] + SUITES['goals'] + SUITES['defaults'], ids=lambda job: job.name)
def test_the_spaces_goals_and_defaults_suites_runs_parse_and_their_envs_take_their_agents(job):
    from xagents.app.benchmark import command_of
    from xagents.app.cli import build_parser
    from xagents.registry import AGENTS
    from xagents.envs.check_env import check_env

    if job.env.startswith('minigrid:') or 'DoorKey' in job.env:
        pytest.importorskip('minigrid')
    assert job.agent in AGENTS and ':' not in job.name and '/' not in job.name
    argv = command_of(job, 0, 'out')[3:]  # after xagents train AGENT
    args = vars(build_parser('train', job.agent, job.env).parse_args(argv))
    assert args['env'] == job.env and args['max_steps'] == job.steps
    result = check_env(job.env, dict(args.get('env_kwargs') or ()), args.get('observation_keys'), steps=10)
    assert result.ok and job.agent in {agent.lower() for agent in result.agents}, result.report()
    assert (result.masks is not None) == ('Taxi' in job.env)


def test_the_defaults_suite_runs_each_agent_on_its_generic_defaults():
    """No preset names a defaults-suite id (CartPole-v1's PPO preset is not Own/CartPole-v1's), so each run gets its
    agent's generic defaults: the settings of an id no hyperparameters.json names."""
    from xagents.registry import agent_class

    for job in SUITES['defaults']:
        presets = agent_class(job.agent).default_hyperparameters
        assert presets(job.env) == presets('FrozenLake-v1')  # (no preset names FrozenLake), job.name
    assert agent_class('ppo').default_hyperparameters('CartPole-v1') != agent_class('ppo').default_hyperparameters(
        f'{OWN}CartPole-v1')
    assert {job.agent for job in SUITES['defaults']} == {'ppo', 'a2c', 'trpo', 'acer', 'dqn', 'qrdqn', 'sac', 'td3', 'ddpg',
                                                         'tqc', 'crossq'}


def test_success_rate_runs_are_tabled_by_success_and_their_labels_keep_them_apart():
    """The goals suite judges success rates; a label (dqn+her against dqn) gives a run its own name and row."""
    from xagents.app.benchmark import EVAL_LINE

    her, alone = (job for job in SUITES['goals'] if job.env == 'BitFlipping-v0')
    assert her.name == 'dqn+her-BitFlipping-v0' and alone.name == 'dqn-BitFlipping-v0'
    log = ('steps 5000  eval reward -30.00 (10 deterministic episodes)  success 0.10\n'
           'time 00:00:09  steps 5100  games 170\nsteps 10000  eval reward -12.5 (10 deterministic episodes)\n')
    assert EVAL_LINE.findall(log) == [('5000', '-30.00', '0.10'), ('10000', '-12.5', '')]
    records = [{**record, 'agent': title, 'env': 'BitFlipping-v0', 'metric': 'success', 'target': 0.9,
                'final_eval': final} for title, final in (('dqn+her', 1.0), ('dqn', 0.0))
               for record in runs([20_000 if final else None])]
    table = summary_table(records)
    assert list(table['agent']) == ['dqn+her', 'dqn'] and list(table['metric']) == ['success', 'success']
    assert '| dqn+her | BitFlipping-v0 | success 0.9 within 200,000 | 1/1 |' in markdown(table)
    assert random_score('BitFlipping-v0', metric='success') == 0.0  # 15 bits: random flips never match


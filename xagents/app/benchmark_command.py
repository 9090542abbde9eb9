"""``xagents benchmark``: its flags, checked before anything runs, and the summary it prints
(:mod:`xagents.app.benchmark` trains the runs and summarises them)."""
from __future__ import annotations

import argparse
import dataclasses
import os

from xagents.app.flags import BACKEND_HELP, ArgumentParser, fail
from xagents.registry import AGENTS
from xagents.utils.console import BACKENDS, load_keras

DESCRIPTION = 'train agents x envs x seeds in parallel processes and summarise them (tables, curves)'


def run_benchmark_command(argv: list[str]) -> None:
    """Parse flags and run a benchmark (``xagents.app.benchmark``): a suite, or agents x envs with one target."""
    from xagents.app import benchmark

    parser = ArgumentParser(prog='xagents benchmark', description=DESCRIPTION + '.', allow_abbrev=False)
    parser.add_argument('--suite', choices=list(benchmark.SUITES), help='a suite of agents, envs, targets and budgets')
    parser.add_argument('--backend', choices=BACKENDS, default=argparse.SUPPRESS, help=BACKEND_HELP)
    parser.add_argument('--agents', nargs='+', choices=list(AGENTS),
                        help='agents: with --envs and --target instead of a suite, or some of a suite\'s')
    parser.add_argument('--envs', nargs='+', help='env ids: with --agents and --target, or some of a suite\'s')
    parser.add_argument('--target', type=float, help='target eval reward of --agents x --envs')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2], help='seeds of each run (default: 0 1 2)')
    parser.add_argument('--all-seeds', action='store_true',
                        help='run every seed of the runs a suite limits to fewer on a CPU (BipedalWalker\'s, Atari\'s)')
    parser.add_argument('--summarize-only', action='store_true',
                        help='run nothing: summarise the runs already finished in --output')
    parser.add_argument('--jobs', type=int, default=1, help='runs trained at once, each its own process (default: 1)')
    parser.add_argument('--max-steps', type=int, help='step budget of every run (default: the suite\'s; 100000)')
    parser.add_argument('--eval-frequency', type=int, help='steps between evaluations (default: the suite\'s; '
                                                           'a tenth of the budget)')
    parser.add_argument('--output', default='benchmark', help='directory of runs and results (default: benchmark); '
                                                              'finished runs in it are kept')
    if not argv:
        parser.print_help()
        return
    args = parser.parse_args(argv)
    if not args.suite and not (args.agents or args.envs):
        fail('xagents benchmark: error: expected --suite, or --agents with --envs and --target')
    if not args.suite and (not args.agents or not args.envs or args.target is None):
        fail('xagents benchmark: error: --agents needs --envs and --target')
    if args.suite and args.target is not None:
        fail(f'xagents benchmark: error: suite {args.suite} sets its own targets: drop --target')
    for name in ('jobs', 'max_steps', 'eval_frequency'):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f'xagents benchmark: error: expected --{name.replace("_", "-")} >= 1, got {getattr(args, name)}')
    if args.suite:  # --agents and --envs pick some of its jobs
        jobs = [job for job in benchmark.SUITES[args.suite]
                if job.agent in (args.agents or [job.agent]) and job.env in (args.envs or [job.env])]
        if not jobs:
            fail(f'xagents benchmark: error: suite {args.suite} has no run of {" ".join(args.agents or ["any agent"])} '
                 f'on {" ".join(args.envs or ["any env"])}')
    else:
        jobs = [benchmark.Job(agent, env, args.target, 100_000, 10_000) for agent in args.agents for env in args.envs]
    budget = args.max_steps
    jobs = [dataclasses.replace(job, steps=budget or job.steps, max_seeds=None if args.all_seeds else job.max_seeds,
                                eval_frequency=args.eval_frequency
                                or (max(1, budget // 10) if budget else job.eval_frequency))
            for job in jobs]
    from xagents.storage.atomic import check_writable

    if args.summarize_only and not os.path.isdir(os.path.join(args.output, 'runs')):
        fail(f'xagents benchmark: error: no finished run of these in {args.output}')
    if not args.summarize_only:  # a backend that cannot load is said here, once, not as each run failing
        load_keras()
    try:
        check_writable(args.output, directory=True)
    except ValueError as error:
        fail(f'xagents benchmark: error: {error}')
    try:
        records = benchmark.run_benchmark(jobs, args.seeds, args.output, args.jobs, run_pending=not args.summarize_only)
    except ValueError as error:
        fail(f'xagents benchmark: error: {error}')
    except RuntimeError as error:
        fail(f'xagents benchmark: error: {error}', 1)
    except KeyboardInterrupt:
        fail('xagents benchmark: interrupted; finished runs are kept and skipped next time', 130)
    if not records:
        fail(f'xagents benchmark: error: no finished run of these in {args.output}')
    print(benchmark.write_summary(records, args.output, args.seeds))
    print(f'Results in {args.output}/ (results.md, results.parquet, curves.png, aggregate.png, machine.json)')

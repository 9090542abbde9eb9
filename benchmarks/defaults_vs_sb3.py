"""The `defaults` suite beside Stable-Baselines3's defaults: each run of the suite (tasks under ids no preset names)
once with xagents' generic defaults (`xagents benchmark --suite defaults`) and once with SB3's or sb3-contrib's
(`benchmarks/sb3_baseline.py defaults` in SB3's own virtual environment), at the same budget, with 10
deterministic evaluation episodes at the same steps; then one table of both::

    python benchmarks/defaults_vs_sb3.py run --sb3-python sb3/bin/python --output runs/defaults --seeds 0 1 2 \
        --agents ppo dqn --envs xagents.envs.unpreset:Own/CartPole-v1
    python benchmarks/defaults_vs_sb3.py table --output runs/defaults
    python benchmarks/defaults_vs_sb3.py figure --output runs/defaults --figure docs/img/defaults-vs-sb3.png

A run already finished (its JSON file in OUTPUT) is not run again, so an interrupted comparison resumes. ACER has no
SB3 counterpart: its rows have xagents' side only.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

import numpy as np

from xagents.app.benchmark import SUITES, Job


def sb3_path(output: str, job: Job, seed: int) -> str:
    return os.path.join(output, 'sb3', f'{job.name}-{seed}.json')


def run_sb3(python: str, job: Job, seed: int, output: str) -> str:
    """One SB3 run in its own process (one torch thread); its last JSON line, written to its file."""
    path = sb3_path(output, job, seed)
    if os.path.exists(path):
        return path
    command = [python, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'sb3_baseline.py'), 'defaults',
               '--algo', job.agent, '--env', job.env, '--steps', str(job.steps), '--eval-frequency',
               str(job.eval_frequency), '--seed', str(seed), *(['--her'] if '--her' in job.flags else [])]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    if result.returncode:
        raise RuntimeError(f'{" ".join(command)} failed: {(result.stderr.strip().splitlines() or ["?"])[-1]}')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as file:
        file.write(result.stdout.strip().splitlines()[-1])
    return path


def run(args: argparse.Namespace, jobs: list[Job]) -> None:
    """xagents' side through `xagents benchmark` (which skips finished runs), then SB3's, ``--jobs`` processes at a
    time (``--side`` runs one of them only)."""
    flags = ['--agents', *sorted({job.agent for job in jobs}), '--envs', *sorted({job.env for job in jobs})]
    if args.side in ('both', 'xagents'):
        subprocess.run([sys.executable, '-m', 'xagents', 'benchmark', '--suite', 'defaults', '--seeds',
                        *map(str, args.seeds), '--jobs', str(args.jobs), '--output', args.output, *flags], check=True)
    if args.side == 'xagents':
        return
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_sb3, args.sb3_python, job, seed, args.output)
                   for job in jobs if job.agent != 'acer' for seed in args.seeds]
        for future in concurrent.futures.as_completed(futures):
            try:
                print(future.result(), flush=True)
            except RuntimeError as error:  # a space SB3's algorithm does not take (SAC's Discrete actions)
                print(error, flush=True)


def side(curves: list[list[tuple[int, float]]], target: float, budget: int) -> str:
    """``reached/runs``, the median first step at the target (a run that missed it counting as its budget: then a
    lower bound, marked ≥) and the mean final evaluation; dashes without runs."""
    if not curves:
        return '— | — | —'
    reached = [next((step for step, value in curve if value >= target), None) for curve in curves]
    steps = np.median([budget if step is None else step for step in reached])
    bound = '' if None not in reached else '≥ '
    finals = np.mean([curve[-1][1] for curve in curves if curve])
    return f'{len(reached) - reached.count(None)}/{len(curves)} | {bound}{steps:,.0f} | {finals:.2f}'


def curves(output: str, job: Job, seeds: list[int]) -> tuple[list, list]:
    """xagents' and SB3's evaluation curves of ``job``, one ``[(step, value), ...]`` per seed that has run (the
    value: reward or success rate, as the job measures)."""
    mine, theirs = [], []
    for seed in seeds:
        path = os.path.join(output, 'runs', f'{job.name}-{seed}.json')
        if os.path.exists(path):  # (step, reward or success rate, as the job measures)
            mine.append([tuple(point) for point in json.load(open(path))['evaluations']])
        if os.path.exists(sb3_path(output, job, seed)):  # (step, reward[, success rate])
            column = 1 if job.metric == 'reward' else 2
            theirs.append([(point[0], point[column]) for point in
                           json.load(open(sb3_path(output, job, seed)))['evaluations']])
    return mine, theirs


def table(args: argparse.Namespace, jobs: list[Job]) -> str:
    """Markdown: per run of the suite, each side's runs at the target, median steps to it and mean final eval."""
    lines = ['| agent | env | target | xagents: reached | steps to target (median) | final eval (mean) | '
             'SB3: reached | steps to target (median) | final eval (mean) |', '|' + '---|' * 9]
    for job in jobs:
        mine, theirs = curves(args.output, job, args.seeds)
        if mine or theirs:
            lines.append(f'| {job.title} | {job.env.rpartition(":")[2]} | {job.target:g} | '
                         f'{side(mine, job.target, job.steps)} | {side(theirs, job.target, job.steps)} |')
    return '\n'.join(lines)


def figure(args: argparse.Namespace, jobs: list[Job]) -> None:
    """One panel per run of the suite: each side's mean evaluation over its seeds against env steps, the seeds'
    range shaded, the target dotted."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    panels = [(job, *curves(args.output, job, args.seeds)) for job in jobs]
    panels = [panel for panel in panels if panel[1] or panel[2]]
    if not panels:
        raise SystemExit(f'no runs in {args.output}')
    columns = 4
    rows = -(-len(panels) // columns)
    plot, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.5 * rows), squeeze=False)
    for axis, (job, mine, theirs) in zip(axes.flat, panels):
        for runs, label, colour in ((mine, 'xagents', 'tab:blue'), (theirs, 'Stable-Baselines3', 'tab:orange')):
            if not runs:
                continue
            steps = np.array(sorted({step for run in runs for step, _ in run}))
            values = np.array([np.interp(steps, *zip(*run)) for run in runs])
            axis.plot(steps, values.mean(0), color=colour, label=f'{label} ({len(runs)})')
            axis.fill_between(steps, values.min(0), values.max(0), color=colour, alpha=0.2)
        axis.axhline(job.target, color='k', linestyle=':', linewidth=1)
        axis.set_title(f'{job.title} {job.env.rpartition("/")[2]}', fontsize=9)
        axis.tick_params(labelsize=7)
        axis.xaxis.set_major_locator(MaxNLocator(4))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda step, _: f'{step / 1000:g}k'))
        axis.legend(fontsize=6, loc='lower right')
    for axis in axes.flat[len(panels):]:
        axis.axis('off')
    plot.supxlabel('env steps', fontsize=9)
    plot.supylabel('deterministic evaluation (10 episodes): reward, or success rate', fontsize=9)
    plot.tight_layout()
    plot.savefig(args.figure, dpi=90)
    plt.close(plot)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('action', choices=['run', 'table', 'figure'])
    parser.add_argument('--output', required=True, help='the folder of both sides\' runs')
    parser.add_argument('--sb3-python', help='run: the Python of a virtual environment with SB3 and sb3-contrib')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--jobs', type=int, default=2, help='run: processes at a time')
    parser.add_argument('--side', choices=['both', 'xagents', 'sb3'], default='both', help='run: whose runs')
    parser.add_argument('--agents', nargs='+', help='only these agents of the suite')
    parser.add_argument('--envs', nargs='+', help='only these env ids of the suite')
    parser.add_argument('--figure', default='defaults-vs-sb3.png', help='figure: the image to write')
    args = parser.parse_args()
    jobs = [job for job in SUITES['defaults'] if (not args.agents or job.agent in args.agents)
            and (not args.envs or job.env in args.envs)]
    if args.action == 'run':
        if args.side != 'xagents' and not args.sb3_python:
            parser.error("run needs --sb3-python unless --side is 'xagents'")
        run(args, jobs)
    if args.action == 'figure':
        figure(args, jobs)
    else:
        print(table(args, jobs))


if __name__ == '__main__':
    main()

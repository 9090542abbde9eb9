"""Put a finished `xagents benchmark` on the site's Results page: its table, commands and two figures.

    python benchmarks/results_page.py box2d /path/to/benchmark-output [--page docs/results.md]
    python benchmarks/results_page.py classic-jax /path/to/benchmark-output-on-jax

Replaces the text between `<!-- results:BLOCK -->` and `<!-- /results:BLOCK -->` on the page with what the
benchmark wrote (results.md, machine.json), and copies curves.png and aggregate.png to
`img/benchmark-BLOCK-curves.png` and `img/benchmark-BLOCK-aggregate.png` beside the page. A block is a suite's
name, with its backend after a dash where the benchmark ran on another backend than TensorFlow.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def section(block: str, output: str) -> str:
    """The page's text of one benchmark: how it was run, its table and commands, its figures."""
    suite = block.split('-')[0] + ' suite' + (f' on {machine_backend(output)}' if '-' in block else '')
    machine = json.load(open(os.path.join(output, 'machine.json')))
    runs = [json.load(open(path)) for path in glob.glob(os.path.join(output, 'runs', '*.json'))]
    versions = machine['versions']
    busy = sum(run['wall_seconds'] for run in runs) / 60
    command = re.sub(r' --output \S+| --summarize-only', '', machine['command'])
    backend = machine.get('backend', 'tensorflow')  # (benchmarks before JAX ran on TensorFlow)
    engine = (f'TensorFlow {versions["tensorflow"]}' if backend == 'tensorflow'
              else f'Keras {versions["keras"]} on {backend_title(backend)} {versions[backend]}')
    header = (f'`{command}` on a {machine["cpus"]}-core CPU ({len(runs)} runs, {busy:.0f} min of run '
              f'time in all; xagents {versions["xagents"]}, {engine}, Gymnasium {versions["gymnasium"]}). Each run trains its whole budget and plays 10 deterministic episodes every '
              f'`eval_frequency` steps; "steps to target" is the first evaluation at or above the target (a run that '
              f'missed it counts as its budget, so a mean marked ≥ is a lower bound, without an interval), "final '
              f'eval" the last one; wall time counts the runs that trained beside it. Means with 95% bootstrap intervals '
              f'over the seeds; the aggregate figure has rliable\'s stratified bootstrap interval over seeds × envs:')
    header = textwrap.fill(header, 110, break_on_hyphens=False, break_long_words=False)
    table = open(os.path.join(output, 'results.md')).read().strip()
    figures = (f'![Evaluation reward of the {suite} against steps and time, mean and 95% interval over seeds]'
               f'(img/benchmark-{block}-curves.png)\n\n'
               f'![Interquartile mean of final evaluations per agent over seeds × envs, 0 = random policy, '
               f'1 = target, 95% stratified bootstrap interval]'
               f'(img/benchmark-{block}-aggregate.png)')
    return f'{header}\n\n{table}\n\n{figures}'


def machine_backend(output: str) -> str:
    """The backend a benchmark ran on, as the docs name it."""
    backend = json.load(open(os.path.join(output, 'machine.json'))).get('backend', 'tensorflow')
    return backend_title(backend)


def backend_title(backend: str) -> str:
    return {'tensorflow': 'TensorFlow', 'jax': 'JAX', 'torch': 'PyTorch'}.get(backend, backend)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('block', help="the page's block: a suite's name, or SUITE-BACKEND (classic-jax)")
    parser.add_argument('output', help='the benchmark\'s --output directory')
    parser.add_argument('--page', default=os.path.join(ROOT, 'docs', 'results.md'))
    args = parser.parse_args()
    text = open(args.page).read()
    start, end = f'<!-- results:{args.block} -->', f'<!-- /results:{args.block} -->'
    if start not in text or end not in text:
        raise SystemExit(f'{args.page} has no {start} ... {end} block')
    text = re.sub(re.escape(start) + '.*?' + re.escape(end),
                  lambda _: f'{start}\n{section(args.block, args.output)}\n{end}', text, flags=re.S)
    images = os.path.join(os.path.dirname(os.path.abspath(args.page)), 'img')
    for name in ('curves', 'aggregate'):
        shutil.copyfile(os.path.join(args.output, f'{name}.png'), os.path.join(images, f'benchmark-{args.block}-{name}.png'))
    with open(args.page, 'w') as file:
        file.write(text)
    print(f'{args.page}: {args.block} results from {args.output}')


if __name__ == '__main__':
    main()

"""Put a finished `xagents benchmark` on the site's Results page: its table, commands and two figures.

    python benchmarks/results_page.py box2d /path/to/benchmark-output [--page docs/results.md]

Replaces the text between `<!-- results:SUITE -->` and `<!-- /results:SUITE -->` on the page with what the
benchmark wrote (results.md, machine.json), and copies curves.png and aggregate.png to
`img/benchmark-SUITE-curves.png` and `img/benchmark-SUITE-aggregate.png` beside the page.
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


def section(suite: str, output: str) -> str:
    """The page's text of one benchmark: how it was run, its table and commands, its figures."""
    machine = json.load(open(os.path.join(output, 'machine.json')))
    runs = [json.load(open(path)) for path in glob.glob(os.path.join(output, 'runs', '*.json'))]
    versions = machine['versions']
    busy = sum(run['wall_seconds'] for run in runs) / 60
    command = re.sub(r' --output \S+| --summarize-only', '', machine['command'])
    header = (f'`{command}` on a {machine["cpus"]}-core CPU ({len(runs)} runs, {busy:.0f} min of run '
              f'time in all; xagents {versions["xagents"]}, TensorFlow {versions["tensorflow"]}, Gymnasium '
              f'{versions["gymnasium"]}). Each run trains its whole budget and plays 10 deterministic episodes every '
              f'`eval_frequency` steps; "steps to target" is the first evaluation at or above the target (a run that '
              f'missed it counts as its budget, so a mean marked ≥ is a lower bound, without an interval), "final '
              f'eval" the last one; wall time counts the runs that trained beside it. Means with 95% bootstrap intervals '
              f'over the seeds; the aggregate figure has rliable\'s stratified bootstrap interval over seeds × envs:')
    header = textwrap.fill(header, 110, break_on_hyphens=False, break_long_words=False)
    table = open(os.path.join(output, 'results.md')).read().strip()
    figures = (f'![Evaluation reward of the {suite} suite against steps and time, mean and 95% interval over seeds]'
               f'(img/benchmark-{suite}-curves.png)\n\n'
               f'![Interquartile mean of final evaluations per agent over seeds × envs, 0 = random policy, '
               f'1 = target, 95% stratified bootstrap interval]'
               f'(img/benchmark-{suite}-aggregate.png)')
    return f'{header}\n\n{table}\n\n{figures}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('suite')
    parser.add_argument('output', help='the benchmark\'s --output directory')
    parser.add_argument('--page', default=os.path.join(ROOT, 'docs', 'results.md'))
    args = parser.parse_args()
    text = open(args.page).read()
    start, end = f'<!-- results:{args.suite} -->', f'<!-- /results:{args.suite} -->'
    if start not in text or end not in text:
        raise SystemExit(f'{args.page} has no {start} ... {end} block')
    text = re.sub(re.escape(start) + '.*?' + re.escape(end),
                  lambda _: f'{start}\n{section(args.suite, args.output)}\n{end}', text, flags=re.S)
    images = os.path.join(os.path.dirname(os.path.abspath(args.page)), 'img')
    for name in ('curves', 'aggregate'):
        shutil.copyfile(os.path.join(args.output, f'{name}.png'), os.path.join(images, f'benchmark-{args.suite}-{name}.png'))
    with open(args.page, 'w') as file:
        file.write(text)
    print(f'{args.page}: {args.suite} results from {args.output}')


if __name__ == '__main__':
    main()

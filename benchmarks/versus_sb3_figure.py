"""The Results page's opening figure: xagents beside Stable-Baselines3, drawn from the page's own table.

Reads the table under ``## Against Stable-Baselines3`` in ``docs/results.md`` (written from
``benchmarks/versus_sb3.py``'s runs) and draws each case's median with its three seeds as dots: whole-process wall
time for the runs to a target or over a fixed budget, env steps per second for the off-policy throughput rows.
The figure cannot drift from the numbers beside it, since it has no numbers of its own.

    python benchmarks/versus_sb3_figure.py docs/results.md docs/img/versus-sb3.png
"""
from __future__ import annotations

import argparse
import re

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

CELL = re.compile(r'([\d.,]+)(?: s)? \(([\d.,]+) · ([\d.,]+) · ([\d.,]+)\)')


def number(text: str) -> float:
    return float(text.replace(',', ''))


def cases(page: str) -> list[dict]:
    """Each row of the table: its case, and xagents' and SB3's median and seeds."""
    section = page.split('\n## Against Stable-Baselines3\n', 1)[1].split('\n## ', 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
        if len(cells) != 4 or not CELL.fullmatch(cells[1]) or not CELL.fullmatch(cells[2]):
            continue
        name = re.sub(r'[‡*`]', '', cells[0]).strip()
        ours, theirs = (CELL.fullmatch(cell).groups() for cell in cells[1:3])
        rows.append({'case': name, 'rate': 'steps/s' in name, 'xagents': [number(value) for value in ours],
                     'sb3': [number(value) for value in theirs], 'ratio': cells[3].replace('*', '')})
    if not rows:
        raise SystemExit('no rows of the form "5.5 s (5.5 · 8.0 · 5.2)" under "## Against Stable-Baselines3"')
    return rows


def draw(rows: list[dict], output: str) -> None:
    """Two panels: wall time (lower is better) and env steps per second (higher is better)."""
    panels = [[row for row in rows if not row['rate']], [row for row in rows if row['rate']]]
    panels = [panel for panel in panels if panel]
    figure, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 0.85 * len(rows)), squeeze=False,
                                gridspec_kw={'height_ratios': [len(panel) for panel in panels]})
    for axis, panel in zip(axes[:, 0], panels):
        for index, row in enumerate(reversed(panel)):
            for offset, library, colour in ((0.18, 'xagents', 'tab:blue'), (-0.18, 'sb3', 'tab:orange')):
                median, *seeds = row[library]
                axis.barh(index + offset, median, height=0.34, color=colour, alpha=0.8,
                          label={'xagents': 'xagents', 'sb3': 'Stable-Baselines3'}[library] if index == 0 else None)
                axis.plot(seeds, [index + offset] * len(seeds), 'k.', markersize=4)
            axis.text(max(row['xagents'] + row['sb3']) * 1.02, index, row['ratio'], va='center', fontsize=9)
        axis.set_yticks(range(len(panel)), [re.sub(r', (wall|env steps/s after warm-up)$', '', row['case'])
                                            for row in reversed(panel)], fontsize=8)
        rate = panel[0]['rate']
        axis.set_xlabel('env steps per second after warm-up (higher is better)' if rate
                        else 'seconds, whole process from launch to exit (lower is better)')
        axis.set_xlim(0, max(max(row['xagents'] + row['sb3']) for row in panel) * 1.3)
    axes[0, 0].legend(loc='upper right', fontsize=8)
    axes[0, 0].set_title('xagents beside Stable-Baselines3, 2-core CPU: the same settings, but each its own preset for\n'
                         'PPO CartPole and SAC Pendulum '
                         '(bars: medians; dots: seeds 0, 1, 2)', fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('page', help='docs/results.md')
    parser.add_argument('output', help='the png to write')
    arguments = parser.parse_args()
    with open(arguments.page, encoding='utf-8') as file:
        draw(cases(file.read()), arguments.output)


if __name__ == '__main__':
    main()

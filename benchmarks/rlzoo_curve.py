"""An RL Zoo training run's curve, from the Monitor files it publishes, beside an xagents run.

RL Zoo publishes each trained agent's Monitor logs (``DLR-RM/rl-trained-agents``: ``ppo/PongNoFrameskip-v4_1/
*.monitor.csv``, one file per env, a row per game with its score ``r``, frames ``l`` and wall time ``t``). This
prints the mean score of the last ``--games`` games, pooled over the envs in the order they finished, at given
agent steps (frames / frame skip, up to the last of them), as xagents' ``--reward-buffer-size`` mean is kept,
for one or more xagents histories beside it; ``--plot`` draws them all.

    python benchmarks/rlzoo_curve.py rl-trained-agents/ppo/PongNoFrameskip-v4_1 \\
        --xagents history.parquet --at 250000 500000 1000000 1500000 2000000 2500000 --plot pong.png
"""
from __future__ import annotations

import argparse
import glob
import os
import tempfile

import pandas as pd

from xagents.storage.history import History, plot_history, read_history


def monitor_games(run: str) -> pd.DataFrame:
    """Every game of the run's Monitor files, in the order they ended."""
    files = sorted(glob.glob(os.path.join(run, '*.monitor.csv')))
    if not files:
        raise SystemExit(f'{run}: no *.monitor.csv files')
    games = pd.concat([pd.read_csv(path, skiprows=1) for path in files], ignore_index=True)  # (line 1: JSON header)
    return games.sort_values('t', ignore_index=True)


def as_history(games: pd.DataFrame, games_in_mean: int, frame_skip: int, until: int, path: str) -> None:
    """Write the games that ended by agent step ``until`` as an xagents history: the mean of the last
    ``games_in_mean`` at each game's end."""
    history = History(path)
    steps = games['l'].cumsum() // frame_skip
    games, steps = games[steps <= until], steps[steps <= until]
    means = games['r'].rolling(games_in_mean, min_periods=1).mean()
    for mean, best, score, step, time in zip(means, means.cummax(), games['r'], steps, games['t'] - games['t'].min()):
        history.append(float(mean), float(best), float(score), int(step), float(time))
    history.flush()


def mean_at(frame: pd.DataFrame, step: int, games_in_mean: int) -> str:
    """The mean of the last ``games_in_mean`` games at ``step`` (``n/a`` before that many have ended, ``-`` past
    the run's end: its last game ended more than 2% of ``step`` before it)."""
    before = frame[frame['step'] <= step]
    if frame['step'].iloc[-1] < 0.98 * step:
        return '-'
    return f'{before["mean_reward"].iloc[-1]:+.1f}' if len(before) >= games_in_mean else 'n/a'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('run', help="a directory of an RL Zoo run's *.monitor.csv files")
    parser.add_argument('--xagents', nargs='*', default=[], help='xagents history files to show beside it')
    parser.add_argument('--labels', nargs='*', help='their names in the table and plot (default: their paths)')
    parser.add_argument('--games', type=int, default=100, help='games in each mean')
    parser.add_argument('--frame-skip', type=int, default=4, help='frames per agent step')
    parser.add_argument('--at', type=int, nargs='+', default=[250_000, 500_000, 1_000_000, 1_500_000, 2_000_000,
                                                              2_500_000], help='agent steps to report')
    parser.add_argument('--plot', help='draw the curves to this image file')
    args = parser.parse_args()
    if args.labels is not None and len(args.labels) != len(args.xagents):
        parser.error(f'expected one label per history file ({len(args.xagents)}), got {len(args.labels)}')
    labels = ['RL Zoo (SB3)', *(args.labels or args.xagents)]
    with tempfile.TemporaryDirectory() as scratch:
        zoo = os.path.join(scratch, 'rlzoo.parquet')
        as_history(monitor_games(args.run), args.games, args.frame_skip, max(args.at), zoo)  # over the same budget
        paths = [zoo, *args.xagents]
        print('| run | ' + ' | '.join(f'{step:,}' for step in args.at) + ' |')
        print('|---' * (len(args.at) + 1) + '|')
        for path, label in zip(paths, labels):
            frame = read_history(path)
            print(f'| {label} | ' + ' | '.join(mean_at(frame, step, args.games) for step in args.at) + ' |')
        if args.plot:
            env_id = os.path.basename(os.path.normpath(args.run)).rsplit('_', 1)[0]
            plot_history(paths, labels, f'{env_id}: mean score of the last {args.games} games', output=args.plot)


if __name__ == '__main__':
    main()

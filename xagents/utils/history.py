"""Training history as parquet (``mean_reward best_reward episode_reward step time``) and its plots."""
from __future__ import annotations

import os
from typing import Sequence

import pandas as pd

from xagents.utils.atomic import atomic_write

COLUMNS = ('mean_reward', 'best_reward', 'episode_reward', 'step', 'time')


class History:
    """Rows of finished episodes, kept in memory and flushed atomically to a parquet file."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.saved = pd.DataFrame({column: [] for column in COLUMNS})
        if path and os.path.exists(path):
            self.saved = read_history(path)
        self.pending: list[tuple] = []

    def __len__(self) -> int:
        return len(self.saved) + len(self.pending)

    def append(self, mean_reward: float, best_reward: float, episode_reward: float,
               step: int, time: float) -> None:
        self.pending.append((mean_reward, best_reward, episode_reward, step, time))

    def frame(self) -> pd.DataFrame:
        """All rows, saved and pending."""
        if not self.pending:
            return self.saved
        new = pd.DataFrame(self.pending, columns=COLUMNS)
        return new if self.saved.empty else pd.concat([self.saved, new], ignore_index=True)

    def flush(self) -> None:
        """Write every row to ``path`` (if any) so that a kill leaves the last good file."""
        if not self.pending:
            return
        self.saved, self.pending = self.frame().astype({'step': 'int64'}), []
        if self.path:
            with atomic_write(self.path) as file:
                self.saved.to_parquet(file, index=False)


def read_history(path: str) -> pd.DataFrame:
    """Read a history file, raising a ValueError that names it if it is not one."""
    try:
        frame = pd.read_parquet(path)
    except Exception as error:  # pyarrow raises several unrelated types for a bad file
        raise ValueError(f'{path} is not a parquet history file: {error}') from None
    missing = [column for column in COLUMNS if column not in frame]
    if missing:
        raise ValueError(f'{path}: expected history columns {list(COLUMNS)}, missing {missing}')
    return frame


def plot_history(
    paths: Sequence[str],
    labels: Sequence[str],
    env_id: str,
    history_interval: int = 1,
    output: str | None = None,
):
    """Plot mean reward against steps and against time for one or more history files.

    Args:
        paths: Parquet history files written by ``--history-checkpoint``.
        labels: One legend label per file.
        env_id: Environment name for the title.
        history_interval: Plot every n-th row (histories have a row per episode).
        output: Save the figure to this image file when given.

    Returns:
        The matplotlib figure.
    """
    import matplotlib

    if output:
        matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    if len(paths) != len(labels):
        raise ValueError(f'expected one label per history file ({len(paths)}), got {len(labels)}')
    if history_interval < 1:
        raise ValueError(f'expected history_interval >= 1, got {history_interval}')
    figure, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for path, label in zip(paths, labels):
        frame = read_history(path).iloc[::history_interval]
        by_step.plot(frame['step'], frame['mean_reward'], label=label)
        by_time.plot(frame['time'], frame['mean_reward'], label=label)
    for axes, xlabel in ((by_step, 'steps'), (by_time, 'time (s)')):
        axes.set_xlabel(xlabel)
        axes.set_ylabel('mean reward')
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(env_id)
    figure.tight_layout()
    if output:
        figure.savefig(output)
    return figure

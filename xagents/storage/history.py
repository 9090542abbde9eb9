"""Training history as parquet (``mean_reward best_reward episode_reward step time``) and its plots.

The file also records, in its metadata, which agent, env and spaces produced it, so that a run of
another agent or env never appends to it. Its pages carry CRC-32 checksums, checked when read: a
changed byte is refused, never read as another reward.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from xagents.storage.atomic import atomic_write
from xagents.storage.readback import damaged

COLUMNS = ('mean_reward', 'best_reward', 'episode_reward', 'step', 'time')
IDENTITY_KEY = b'xagents'
HISTORY_FIX = 'use a copy of it, or another history file'
IDENTITY_LABELS = {'agent': 'agent', 'env_id': 'env', 'observation_space': 'observation space',
                   'action_space': 'action space'}


def check_identity(source: str, saved: dict[str, str], current: dict[str, str | None]) -> None:
    """Raise a ValueError naming ``source`` if it was made by another agent, env or spaces than ``current``."""
    for key, label in IDENTITY_LABELS.items():
        theirs, ours = saved.get(key), current.get(key)
        if theirs and ours and theirs != ours:
            raise ValueError(f'{source} comes from a run with {label} {theirs}, this one has {ours}')


class History:
    """Rows of finished episodes, kept in memory and flushed atomically to a parquet file."""

    def __init__(self, path: str | None, identity: dict[str, str | None] | None = None) -> None:
        """Open ``path`` (an existing file's rows are kept) for a run of ``identity``.

        Raises:
            ValueError: the file is not a history, or comes from another agent, env or spaces.
        """
        self.path, self.identity = path, identity or {}
        self.saved = pd.DataFrame({column: [] for column in COLUMNS})
        if path and os.path.isdir(path):
            raise ValueError(f'{path} is a directory, expected a file name')
        if path and os.path.exists(path):
            self.saved = read_history(path)
            check_identity(path, read_identity(path), self.identity)
        self.pending: list[tuple] = []
        self.rewound = False

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

    def rewind(self, step: int) -> int:
        """Keep only the episodes that ended by env step ``step`` (the file loses the others at the next flush);
        return how many were dropped."""
        frame = self.frame()
        kept = frame[frame['step'] <= step]
        self.saved, self.pending = kept.reset_index(drop=True), []
        self.rewound = len(kept) < len(frame)  # the file still holds them: the next flush writes it
        return len(frame) - len(kept)

    def flush(self) -> None:
        """Write every row to ``path`` (if any) so that a kill leaves the last good file."""
        if not self.pending and not self.rewound:
            return
        self.saved, self.pending, self.rewound = self.frame().astype({'step': 'int64'}), [], False
        if self.path:
            table = pa.Table.from_pandas(self.saved, preserve_index=False)
            identity = {key: value for key, value in self.identity.items() if value is not None}
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   IDENTITY_KEY: json.dumps(identity).encode()})
            with atomic_write(self.path) as file:
                pq.write_table(table, file, write_page_checksum=True)


def read_identity(path: str) -> dict[str, str]:
    """The agent, env and spaces recorded in a history file (empty for files of older versions)."""
    metadata = pq.read_schema(path).metadata or {}
    try:
        return dict(json.loads(metadata.get(IDENTITY_KEY, b'{}')))
    except (ValueError, TypeError):
        raise damaged(path, 'its record of the agent and env is not JSON', HISTORY_FIX) from None


def read_history(path: str) -> pd.DataFrame:
    """Read a history file, raising a ValueError that names it if it is not one or is damaged."""
    try:
        frame = pd.read_parquet(path, page_checksum_verification=True)
    except Exception as error:  # pyarrow raises several unrelated types for a bad file
        reason = ' '.join(str(error).split())  # one line
        raise ValueError(f'{path} is not a whole parquet history file ({reason}); {HISTORY_FIX}') from None
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
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        figure.savefig(output)
    return figure

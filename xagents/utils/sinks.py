"""Metric sinks: each takes ``write(metrics, step)`` and ``close()``; the training loop feeds them all."""
from __future__ import annotations

import os


class WandbSink:
    """Log metrics to Weights & Biases (works offline with ``WANDB_MODE=offline``)."""

    def __init__(self, session: str, config: dict) -> None:
        import wandb

        self.run = wandb.init(project=os.environ.get('WANDB_PROJECT', 'xagents'), name=session,
                              config=config, reinit='finish_previous')

    def write(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class TensorBoardSink:
    """Write metrics as TensorBoard scalar summaries under ``logdir``."""

    def __init__(self, logdir: str) -> None:
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(logdir)

    def write(self, metrics: dict[str, float], step: int) -> None:
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                self.tf.summary.scalar(name, value)

    def close(self) -> None:
        self.writer.close()

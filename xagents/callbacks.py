"""Deprecated location of the run callbacks, kept importable for one release: use :mod:`xagents.training.callbacks`."""
from xagents.training.callbacks import (Callback, Checkpoints, Evaluation, Plateau, ProgressBar, ProgressLines, Saves,
                                        TensorBoard, Wandb)

__all__ = ['Callback', 'Checkpoints', 'Evaluation', 'Plateau', 'ProgressBar', 'ProgressLines', 'Saves', 'TensorBoard',
           'Wandb']

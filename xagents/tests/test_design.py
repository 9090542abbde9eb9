"""The design's promises: arrows point one way, and an agent is its own package plus one registry line."""
from __future__ import annotations

import ast
import os
import pathlib

import pandas as pd
import pytest
import tensorflow as tf

import xagents
from xagents.base import OnPolicy
from xagents.registry import AGENTS

PACKAGE = pathlib.Path(xagents.__file__).parent
SHARED = [PACKAGE / name for name in ('base.py', 'run.py', 'callbacks.py', 'evaluation.py')] + sorted((PACKAGE / 'utils').glob('*.py'))


def imports(path: pathlib.Path) -> set[str]:
    """The modules a source file imports by name (``import a.b``, ``from a.b import c``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize('path', SHARED, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_arrows_point_one_way(path):
    """utils <- run, callbacks <- base <- agents <- registry <- cli, tuning's callers: no import goes up."""
    agent_packages = {entry.partition(':')[0].rsplit('.', 1)[0] for entry in AGENTS.values()}  # xagents.ppo...
    above = {'xagents.registry', 'xagents.cli'} | agent_packages
    if path.parent.name == 'utils':
        above |= {'xagents.base', 'xagents.run', 'xagents.callbacks', 'xagents.evaluation'}
    for module in imports(path):
        assert not any(module == upper or module.startswith(upper + '.') for upper in above), module
        assert module != 'xagents', 'the package root lists the agents'


class Toy(OnPolicy):
    """REINFORCE with a value baseline on one actor-critic model: the smallest agent the machinery trains."""

    def __init__(self, envs, model: str | None = None, *, n_steps: int = 16, lr: float = 1e-3, **kwargs) -> None:
        """
        Args:
            model: Actor-critic model: a .cfg file (default: the on-policy one).
            n_steps: Steps per env in each rollout.
            lr: Learning rate.
        """
        super().__init__(envs, n_steps=n_steps, lr=lr, **kwargs)
        self.model = self.build_actor_critic(model)
        self.optimizer = self.make_optimizer('model')

    @tf.function
    def train_step(self, observations, actions, log_probs, advantages, returns) -> dict:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            params, values = self.model(observations)
            new_log_probs, _ = self.log_prob_entropy(params, actions)
            loss = -tf.reduce_mean(new_log_probs * advantages) + tf.reduce_mean((returns - values[:, 0]) ** 2)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {'loss': loss}


def test_an_agent_defined_outside_the_package_trains_through_the_command_line(monkeypatch, workdir, xagents_cli):
    """The "add an agent" steps of docs/design.md: a class (here in this test), one registry line, nothing else."""
    monkeypatch.setitem(AGENTS, 'toy', f'{__name__}:Toy')
    status, out, _ = xagents_cli('train', 'toy')
    assert status == 0 and '--n-steps N' in out and 'Steps per env in each rollout. (default: 16)' in ' '.join(out.split())
    status, out, err = xagents_cli('train', 'toy', '--env', 'CartPole-v1', '--max-steps', '3000', '--seed', '0',
                                   '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet')
    assert status == 0, err
    assert 'Maximum steps (3000) reached' in out and len(pd.read_parquet('h.parquet')) > 10
    status, out, err = xagents_cli('play', 'toy', '--env', 'CartPole-v1', '--weights', 'w.tf', '--max-steps', '20')
    assert status == 0 and 'Episode reward' in out, err
    assert os.path.getsize('w.tf') > 0


def test_ci_runs_exactly_the_test_command_the_readme_gives():
    readme = (PACKAGE.parent / 'README.md').read_text()
    section = readme.split('\n## Tests\n', 1)[1]
    command = section.split('```sh\n', 1)[1].split('\n```', 1)[0].strip()
    install, _, run = command.partition(' && ')  # on a fresh machine the command installs what the tests need
    assert install.startswith('pip install ') and run.startswith('python -m pytest ') and len(command.splitlines()) == 1
    assert command in (PACKAGE.parent / '.ci' / 'run').read_text().splitlines()
    assert readme.count('pytest') == 1, 'one command in the README names the test runner'

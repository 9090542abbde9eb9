"""Shared fixtures: quiet TensorFlow, offline wandb, a per-test working directory."""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('WANDB_MODE', 'offline')
os.environ.setdefault('WANDB_SILENT', 'true')

import pytest  # noqa: E402


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run the test inside an empty temporary directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path

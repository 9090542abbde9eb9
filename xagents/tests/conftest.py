"""Shared fixtures: quiet TensorFlow, offline wandb, a per-test working directory."""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('WANDB_MODE', 'offline')
os.environ.setdefault('WANDB_SILENT', 'true')
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')  # as xagents sets it for PyTorch, which test modules import first

import logging  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# pytest-xdist's worker processes ignore Ctrl-C (it is the controller's to handle), and a command a test starts would
# inherit that: Python leaves an ignored SIGINT ignored. A user's terminal does not ignore it, so neither do the tests.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope='session')
def xagents_command() -> list[str]:
    """The installed ``xagents`` console script, the one way tests run the command as users do."""
    script = shutil.which('xagents', path=os.path.dirname(sys.executable))
    if script is None:
        pytest.fail(f'no xagents command beside {sys.executable}: install the package (pip install .)')
    return [script]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run the test inside an empty temporary directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def xagents_cli(capsys, caplog):
    """Run ``xagents ARGV`` in this process; the call returns (exit status, log + stdout, stderr)."""
    from xagents.app.cli import main

    def run(*argv):
        caplog.set_level(logging.INFO)
        caplog.clear()
        try:
            main(list(argv))
            status = 0
        except SystemExit as exit_:
            status = exit_.code
        captured = capsys.readouterr()
        return status, caplog.text + captured.out, captured.err

    return run

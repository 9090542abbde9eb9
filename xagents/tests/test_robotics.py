"""Gymnasium-Robotics' FetchReach, the usual HER task, beside the MuJoCo that the robotics extra brings."""
import numpy as np
import pytest

pytest.importorskip('gymnasium_robotics', reason="needs the robotics extra: pip install '.[robotics]'")


def test_fetchreach_builds_with_rl_zoos_preset_and_reports_success(workdir):
    from xagents import SAC, check_env

    agent = SAC.from_env('gymnasium_robotics:FetchReach-v4', seed=0, quiet=True)
    assert agent.her and agent.gamma == 0.95 and agent.envs.num_envs == 1  # RL Zoo's FetchReach settings
    assert check_env('gymnasium_robotics:FetchReach-v4').ok
    run = agent.fit(max_steps=1500, eval_frequency=1500, eval_episodes=2)
    assert run.steps == 1500
    evaluation = agent.evaluate(episodes=2, seed=0)
    assert evaluation.success_rate is not None and 0.0 <= evaluation.success_rate <= 1.0
    assert np.all(evaluation.lengths == 50)

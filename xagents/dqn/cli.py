"""What ``xagents tune dqn`` may search and how; everything else about a flag comes from DQN's signature."""
from xagents.utils.cli import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'target_update_interval': 'log', 'epsilon_end': 'uniform',
    'epsilon_decay_steps': 'log', 'grad_norm': 'log', 'double': 'categorical', 'dueling': 'categorical',
    'prioritized': 'categorical', 'model': 'categorical',
}

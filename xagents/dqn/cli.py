"""DQN's command-line face: what ``xagents tune dqn`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from DQN's signature."""
from xagents.utils.tunable import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'target_update_interval': 'log', 'epsilon_end': 'uniform',
    'epsilon_decay_steps': 'log', 'grad_norm': 'log', 'double': 'categorical', 'dueling': 'categorical',
    'prioritized': 'categorical', 'model': 'categorical',
}

EXAMPLES = [
    'xagents train dqn --env CartPole-v1 --target-reward 475 --eval-frequency 2500 --eval-episodes 10 --stop-on eval',
    'xagents train dqn --env CartPole-v1 --double --dueling --prioritized --return-steps 3 --max-steps 30000',
]

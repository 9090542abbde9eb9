"""QR-DQN's command-line face: what ``xagents tune qrdqn`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from QRDQN's signature."""
from xagents.dqn.cli import TUNABLE as DQN_TUNABLE

TUNABLE = {**DQN_TUNABLE, 'n_quantiles': 'log'}

EXAMPLES = [
    'xagents train qrdqn --env CartPole-v1 --target-reward 475 --eval-frequency 2500 --eval-episodes 10 '
    '--stop-on eval',
    'xagents train qrdqn --env LunarLander-v3 --target-reward 200 --max-steps 100000',
]

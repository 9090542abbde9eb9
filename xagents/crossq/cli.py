"""CrossQ's command-line face: what ``xagents tune crossq`` searches (and how), examples, and the syntax of its own
flags; everything else about a flag comes from CrossQ's signature."""
from xagents.sac.cli import TUNABLE as SAC_TUNABLE

TUNABLE = {**{name: how for name, how in SAC_TUNABLE.items() if name != 'tau'}, 'policy_delay': 'log',
           'batch_norm_momentum': 'log'}

EXAMPLES = [
    'xagents train crossq --env Pendulum-v1 --target-reward -200',
    'xagents train crossq --env Hopper-v5 --max-steps 300000 --eval-frequency 20000 --eval-episodes 10',
]

"""TQC's command-line face: what ``xagents tune tqc`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from TQC's signature."""
from xagents.sac.cli import TUNABLE as SAC_TUNABLE

TUNABLE = {**SAC_TUNABLE, 'n_quantiles': 'log', 'top_quantiles_to_drop_per_net': 'log', 'n_critics': 'log'}

EXAMPLES = [
    'xagents train tqc --env Pendulum-v1 --target-reward -200',
    'xagents train tqc --env Hopper-v5 --max-steps 300000 --eval-frequency 20000 --eval-episodes 10',
]

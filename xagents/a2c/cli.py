"""A2C's command-line face: what ``xagents tune a2c`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from A2C's signature."""
from xagents.utils.tunable import ON_POLICY_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'opt_epsilon': 'log', 'model': 'categorical', 'use_sde': 'categorical', 'log_std_init': 'uniform',
}

EXAMPLES = [
    'xagents train a2c --env CartPole-v1 --target-reward 475',
    'xagents train a2c --env Pendulum-v1 --target-reward -250',
]

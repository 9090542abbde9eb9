"""ACER's command-line face: what ``xagents tune acer`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from ACER's signature."""
from xagents.utils.tunable import COMMON_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **COMMON_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'n_steps': 'log', 'importance_c': 'log', 'delta': 'log', 'ema_alpha': 'uniform',
    'replay_ratio': 'uniform', 'buffer_max_size': 'log', 'buffer_initial_size': 'log', 'rmsprop_epsilon': 'log',
    'trust_region': 'categorical', 'model': 'categorical',
}

EXAMPLES = [
    'xagents train acer --env CartPole-v1 --target-reward 475',
    'xagents train acer --env PongNoFrameskip-v4 --max-steps 1000000',
]

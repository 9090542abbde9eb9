"""What ``xagents tune acer`` may search and how; everything else about a flag comes from ACER's signature."""
from xagents.utils.cli import COMMON_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **COMMON_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'importance_c': 'log', 'delta': 'log', 'ema_alpha': 'uniform',
    'replay_ratio': 'uniform', 'buffer_size': 'log', 'replay_start': 'log', 'rmsprop_epsilon': 'log',
    'trust_region': 'categorical', 'model': 'categorical',
}

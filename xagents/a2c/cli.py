"""What ``xagents tune a2c`` may search and how; everything else about a flag comes from A2C's signature."""
from xagents.utils.cli import ON_POLICY_TUNABLE, LOSS_COEFFICIENTS_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, **LOSS_COEFFICIENTS_TUNABLE, 'opt_epsilon': 'log', 'model': 'categorical',
}

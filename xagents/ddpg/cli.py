"""What ``xagents tune ddpg`` may search and how; everything else about a flag comes from DDPG's signature."""
from xagents.utils.cli import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'noise_type': 'categorical', 'critic_l2': 'log', 'actor_model': 'categorical',
    'critic_model': 'categorical',
}

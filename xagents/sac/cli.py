"""What ``xagents tune sac`` may search and how; everything else about a flag comes from SAC's signature."""
from xagents.utils.cli import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'alpha': 'log', 'target_entropy': 'uniform', 'actor_model': 'categorical',
    'critic_model': 'categorical',
}

"""What ``xagents tune td3`` may search and how; everything else about a flag comes from TD3's signature."""
from xagents.utils.cli import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'noise_type': 'categorical', 'policy_delay': 'categorical',
    'policy_noise_coef': 'uniform', 'noise_clip': 'uniform', 'actor_model': 'categorical', 'critic_model': 'categorical',
}

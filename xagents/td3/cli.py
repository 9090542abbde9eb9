"""TD3's command-line face: what ``xagents tune td3`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from TD3's signature."""
from xagents.ddpg.noise import parse_noise_type
from xagents.utils.tunable import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'noise_type': 'categorical', 'policy_delay': 'categorical',
    'policy_noise_coef': 'uniform', 'noise_clip': 'uniform', 'actor_model': 'categorical', 'critic_model': 'categorical',
}

EXAMPLES = [
    'xagents train td3 --env Pendulum-v1 --target-reward -200',
    'xagents train td3 --env LunarLanderContinuous-v3 --max-steps 300000',
]
TYPES = {'noise_type': parse_noise_type}  # checked while parsing: refused before TensorFlow loads

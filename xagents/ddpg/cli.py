"""DDPG's command-line face: what ``xagents tune ddpg`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from DDPG's signature."""
from xagents.ddpg.noise import parse_noise_type
from xagents.utils.tunable import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'noise_type': 'categorical', 'critic_l2': 'log', 'actor_model': 'categorical',
    'critic_model': 'categorical',
}

EXAMPLES = [
    'xagents train ddpg --env Pendulum-v1 --target-reward -200',
    'xagents train ddpg --env Pendulum-v1 --noise-type adaptive-param_0.2 --max-steps 20000',
]
TYPES = {'noise_type': parse_noise_type}  # checked while parsing: refused before TensorFlow loads

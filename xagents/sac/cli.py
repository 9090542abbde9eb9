"""SAC's command-line face: what ``xagents tune sac`` searches (and how), examples, and the syntax
of its own flags; everything else about a flag comes from SAC's signature."""
from xagents.utils.tunable import OFF_POLICY_TUNABLE

TUNABLE = {
    **OFF_POLICY_TUNABLE, 'alpha': 'log', 'target_entropy': 'uniform', 'actor_model': 'categorical',
    'critic_model': 'categorical', 'use_sde': 'categorical', 'log_std_init': 'uniform', 'use_expln': 'categorical',
}

EXAMPLES = [
    'xagents train sac --env Pendulum-v1 --target-reward -200',
    'xagents train sac --env CartPole-v1 --target-reward 475 --eval-frequency 2500 --eval-episodes 10 --stop-on eval',
]

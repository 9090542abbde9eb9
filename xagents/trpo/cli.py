"""What ``xagents tune trpo`` may search and how; everything else about a flag comes from TRPO's signature."""
from xagents.utils.cli import ON_POLICY_TUNABLE

TUNABLE = {
    **ON_POLICY_TUNABLE, 'max_kl': 'log', 'cg_iterations': 'uniform', 'cg_damping': 'log',
    'line_search_shrink': 'uniform', 'critic_iterations': 'uniform', 'mini_batches': 'log',
    'normalize_advantages': 'categorical', 'actor_model': 'categorical', 'critic_model': 'categorical',
}

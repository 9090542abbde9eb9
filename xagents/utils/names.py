"""Parameter names users bring from Stable-Baselines3 and RL Zoo, and the suggestion for a name that is none
of xagents': one table for the command line (``--learning-rate``) and for Python (``learning_rate=``)."""
from __future__ import annotations

import difflib

# Stable-Baselines3's (or RL Zoo's) name: xagents' same idea, under its name.
SB3_NAMES: dict[str, str] = {
    'learning_rate': 'lr', 'n_epochs': 'ppo_epochs', 'ent_coef': 'entropy_coef', 'vf_coef': 'value_loss_coef',
    'max_grad_norm': 'grad_norm', 'gae_lambda': 'lam', 'buffer_size': 'buffer_max_size',
    'learning_starts': 'buffer_initial_size', 'train_freq': 'update_every', 'batch_size': 'buffer_batch_size',
    'exploration_final_eps': 'epsilon_end', 'exploration_initial_eps': 'epsilon_start',
    'total_timesteps': 'max_steps', 'n_timesteps': 'max_steps', 'n': 'max_steps', 'env_id': 'env',
    'num_envs': 'n_envs', 'log_interval': 'log_frequency', 'callback': 'callbacks', 'tensorboard_log': 'tensorboard',
    'eval_freq': 'eval_frequency', 'n_eval_episodes': 'eval_episodes',
    'n_sampled_goal': 'her_goals', 'goal_selection_strategy': 'her_strategy',
}
# Names whose xagents counterpart is not the same idea renamed: (in Python, on the command line).
HOW = {
    'verbose': ('quiet (quiet=True logs nothing)', '--quiet'),
    'reset_num_timesteps': ('total (total=True is reset_num_timesteps=False)', None),
    'policy_kwargs': ('a .cfg file or a Keras model as model, actor_model or critic_model',
                      '--model, --actor-model or --critic-model with a .cfg file'),
    'policy': ("no policy argument: PPO(env) or PPO.from_env('CartPole-v1')", None),
    'exploration_fraction': ('epsilon_decay_steps (env steps: exploration_fraction x total steps)',
                             '--epsilon-decay-steps (env steps: exploration_fraction x total steps)'),
    'replay_buffer_class': ('her=True for HerReplayBuffer', '--her for HerReplayBuffer'),
    'replay_buffer_kwargs': ('her_goals and her_strategy (HerReplayBuffer\'s n_sampled_goal and goal_selection_strategy)',
                             '--her-goals and --her-strategy (HerReplayBuffer\'s n_sampled_goal and '
                             'goal_selection_strategy)'),
}
# On-policy agents count minibatches per rollout where Stable-Baselines3 gives a minibatch's size.
MINIBATCH_SIZE = ('mini_batches (a count: mini_batches = n_steps x n_envs / batch_size)',
                  '--mini-batches (a count: n_steps x n_envs / batch size)')


def suggestion(name: str, known: set[str], flags: bool = False) -> str | None:
    """How to say ``name`` to something that takes the parameters ``known``: a Stable-Baselines3 name's
    xagents twin, else the closest known name; as a flag (``--name``) when ``flags``; None when nothing fits."""
    if name == 'batch_size' and 'buffer_batch_size' not in known and 'mini_batches' in known:
        return MINIBATCH_SIZE[flags]
    if name in HOW:
        return HOW[name][flags]
    alias = SB3_NAMES.get(name)
    found = alias if alias in known else next(iter(difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)),
                                              None)
    if found is None:
        return None
    return '--' + found.replace('_', '-') if flags else found


def unknown_parameter(owner: str, name: str, known: set[str]) -> TypeError:
    """The error for a parameter that ``owner`` does not take, with a suggestion when there is one."""
    hint = suggestion(name, known)
    return TypeError(f'{owner} got an unexpected parameter {name!r}' + (f': did you mean {hint}?' if hint else ''))

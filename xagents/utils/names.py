"""Parameter names users bring from Stable-Baselines3 and RL Zoo, and the suggestion for a name that is none
of xagents': one table for the command line (``--learning-rate``) and for Python (``learning_rate=``)."""
from __future__ import annotations

import difflib

# Stable-Baselines3's (or RL Zoo's) name: xagents' same idea, under its name (or names: the first the owner takes).
SB3_NAMES: dict[str, str | tuple[str, ...]] = {
    'learning_rate': 'lr', 'n_epochs': 'ppo_epochs', 'ent_coef': 'entropy_coef', 'vf_coef': 'value_loss_coef',
    'max_grad_norm': 'grad_norm', 'gae_lambda': 'lam', 'buffer_size': 'buffer_max_size',
    'learning_starts': 'buffer_initial_size', 'train_freq': 'update_every', 'batch_size': 'buffer_batch_size',
    'exploration_final_eps': 'epsilon_end', 'exploration_initial_eps': 'epsilon_start',
    'total_timesteps': 'max_steps', 'n_timesteps': 'max_steps', 'n': 'max_steps', 'env_id': 'env',
    'num_envs': 'n_envs', 'log_interval': 'log_frequency', 'callback': 'callbacks',
    'eval_freq': 'eval_frequency', 'n_eval_episodes': ('eval_episodes', 'episodes'),
    'n_sampled_goal': 'her_goals', 'goal_selection_strategy': 'her_strategy',
    'norm_obs': 'normalize_observations', 'norm_reward': 'normalize_rewards',  # VecNormalize's
}
# Names whose xagents counterpart is not the same idea renamed: (in Python, on the command line).
HOW: dict[str, tuple[str, str]] = {
    'verbose': ('quiet (quiet=True logs nothing)', '--quiet'),
    'reset_num_timesteps': ('total (total=True is reset_num_timesteps=False)', '--total'),
    'policy_kwargs': ('a .cfg file or a Keras model as model, actor_model or critic_model',
                      '--model, --actor-model or --critic-model with a .cfg file'),
    'net_arch': ('a .cfg file (net_arch=[64, 64] is two [dense-N] sections of units=64) or a Keras model as model, '
                 'actor_model or critic_model', '--model, --actor-model or --critic-model with a .cfg file '
                 '(net_arch=[64, 64] is two [dense-N] sections of units=64)'),
    'policy': ("no policy argument: PPO(env) or PPO.from_env('CartPole-v1')", 'no policy: xagents train AGENT --env ID'),
    'exploration_fraction': ('epsilon_decay_steps (env steps: exploration_fraction x total steps)',
                             '--epsilon-decay-steps (env steps: exploration_fraction x total steps)'),
    'replay_buffer_class': ('her=True for HerReplayBuffer', '--her for HerReplayBuffer'),
    'replay_buffer_kwargs': ('her_goals and her_strategy (HerReplayBuffer\'s n_sampled_goal and goal_selection_strategy)',
                             '--her-goals and --her-strategy (HerReplayBuffer\'s n_sampled_goal and '
                             'goal_selection_strategy)'),
    'tensorboard_log': ('fit(tensorboard=DIR)', '--tensorboard DIR'),
    'action_noise': ("noise_type ('normal_0.1' for NormalActionNoise(sigma=0.1), 'ou_0.2' for "
                     'OrnsteinUhlenbeckActionNoise(sigma=0.2), scaled to the action bounds; DDPG and TD3)',
                     '--noise-type normal_0.1 (NormalActionNoise(sigma=0.1)) or ou_0.2 '
                     '(OrnsteinUhlenbeckActionNoise(sigma=0.2)), scaled to the action bounds; DDPG and TD3'),
    'tb_log_name': ("fit(tensorboard=DIR): the run's own directory, as tensorboard='logs/NAME'",
                    "--tensorboard DIR: the run's own directory, as --tensorboard logs/NAME"),
    'device': ("CUDA_VISIBLE_DEVICES (no device parameter: TensorFlow runs on a GPU it sees; "
               "CUDA_VISIBLE_DEVICES='' set before it loads keeps it on the CPU, CUDA_VISIBLE_DEVICES=1 picks GPU 1)",
               'CUDA_VISIBLE_DEVICES (no --device: CUDA_VISIBLE_DEVICES= xagents train ... keeps TensorFlow on the '
               'CPU, CUDA_VISIBLE_DEVICES=1 xagents train ... picks GPU 1)'),
    'clip_obs': ("normalize_observations (VecNormalize's norm_obs; it clips normalised observations to +-10, +-5 for "
                 'off-policy agents: no clip_obs of its own)',
                 "--normalize-observations (VecNormalize's norm_obs; it clips normalised observations to +-10, +-5 "
                 'for off-policy agents: no clip_obs of its own)'),
    'clip_reward': ("normalize_rewards (VecNormalize's norm_reward; it clips scaled rewards to +-10: no clip_reward of "
                    'its own)', "--normalize-rewards (VecNormalize's norm_reward; it clips scaled rewards to +-10: no "
                                'clip_reward of its own)'),
    'progress_bar': ('quiet (fit draws a progress bar on a terminal unless quiet=True)',
                     '--quiet (a progress bar is drawn on a terminal unless --quiet)'),
    'wrapper_class': ("wrapper (a function gym.Env -> gym.Env applied to every env, evaluation's too: "
                      "PPO.from_env('CartPole-v1', wrapper=fn), create_envs(..., wrapper=fn))",
                      '--wrapper module:callable (a function gym.Env -> gym.Env applied to every env, '
                      "evaluation's too)"),
    'use_sde': ('PPO, A2C, SAC, TQC or CrossQ, which take use_sde (gSDE)',
                'xagents train ppo, a2c, sac, tqc or crossq, which take --use-sde (gSDE)'),
    # RL Zoo's train.py flags.
    'f': ("save_dir and history_checkpoint (RL Zoo's -f logs/)",
          "--save-dir DIR and --history-checkpoint FILE (RL Zoo's -f logs/; without them a run goes into "
          'runs/AGENT/ENV_N/ of the working directory)'),
    'log_folder': ("save_dir and history_checkpoint (RL Zoo's --log-folder)",
                   "--save-dir DIR and --history-checkpoint FILE (RL Zoo's --log-folder; without them a run goes "
                   'into runs/AGENT/ENV_N/ of the working directory)'),
    'hyperparams': ('each setting as its own parameter: PPO(env, lr=1e-3, n_steps=128)',
                    'each setting as its own flag: --lr 0.001 --n-steps 128 (xagents train AGENT --help lists them)'),
    'params': ('each setting as its own parameter: PPO(env, lr=1e-3, n_steps=128)',
               'each setting as its own flag: --lr 0.001 --n-steps 128 (xagents train AGENT --help lists them)'),
    'vec_env': ("async_envs=True (RL Zoo's --vec-env subproc)", "--async-envs (RL Zoo's --vec-env subproc)"),
    'progress': ('quiet (fit draws a progress bar on a terminal unless quiet=True)',
                 '--quiet (a progress bar is drawn on a terminal unless --quiet)'),
    'P': ('quiet (fit draws a progress bar on a terminal unless quiet=True)',
          '--quiet (a progress bar is drawn on a terminal unless --quiet)'),
    'trained_agent': ('Agent.load(directory)', "--weights PATH (a save directory or --checkpoints' files)"),
    'i': ('Agent.load(directory)', "--weights PATH (a save directory or --checkpoints' files)"),
    'optimize': ('xagents tune AGENT --env ID (an Optuna search)', 'xagents tune AGENT --env ID (an Optuna search)'),
    'optimize_hyperparameters': ('xagents tune AGENT --env ID (an Optuna search)',
                                 'xagents tune AGENT --env ID (an Optuna search)'),
    'track': ('monitor_session=NAME (a wandb run)', '--monitor-session NAME (a wandb run)'),
    'return_episode_rewards': ('the EvaluationResult evaluate returns (its .returns and .lengths are the per-episode '
                               'returns and lengths; mean, std = result unpacks as evaluate_policy\'s pair)',
                               "--episodes N (xagents play logs each episode's reward)"),
}
# Names whose counterpart depends on the owner, where it does not take the SB3_NAMES twin: name: {a parameter the
# owner takes: (in Python, on the command line)}.
BY_OWNER: dict[str, dict[str, tuple[str, str]]] = {
    # On-policy agents count minibatches per rollout where Stable-Baselines3 gives a minibatch's size.
    'batch_size': {'mini_batches': ('mini_batches (a count: mini_batches = n_steps x n_envs / batch_size)',
                                    '--mini-batches (a count: n_steps x n_envs / batch size)')},
    # SAC's entropy weight: ent_coef=0.1 is fixed, 'auto' tuned, 'auto_0.1' tuned from 0.1.
    'ent_coef': {'alpha': ("alpha=X for a fixed entropy weight; left unset (ent_coef='auto') it is tuned "
                           "automatically towards target_entropy, from initial_alpha (ent_coef='auto_0.1' is "
                           'initial_alpha=0.1)',
                           "--alpha X for a fixed entropy weight; without it (ent_coef='auto') it is tuned "
                           "automatically towards --target-entropy, from --initial-alpha (ent_coef='auto_0.1' is "
                           '--initial-alpha 0.1)')},
}
# Stable-Baselines3's special values of a parameter xagents shares, and how to say them here.
SB3_VALUES: dict[tuple[str, object], str] = {
    ('target_entropy', 'auto'): "Stable-Baselines3's 'auto' is the default here: leave target_entropy unset "
                                '(-dim(A) for Box actions, 0.89 log n for n discrete ones)',
    ('gradient_steps', -1): "Stable-Baselines3's -1 (as many gradient steps as env steps collected) is "
                            'gradient_steps equal to update_every',
}
# Stable-Baselines3's methods that agents have under another name (or not at all): how to say them.
SB3_METHODS: dict[str, str] = {
    'learn': ("fit(max_steps=N) trains N env steps (Stable-Baselines3's learn(total_timesteps=N)), "
              'fit(target_reward=R) until the mean reward reaches R; both return the Run'),
    'get_env': 'the agent\'s envs are agent.envs (a Gymnasium vector env)',
    'set_env': 'an agent keeps the envs it was built on: Agent.load(directory, env=...) rebuilds it on others',
    'env': "the agent's envs are agent.envs (a Gymnasium vector env)",
    'policy': "the agent's Keras models are agent.models, by role ('model', or 'actor' and 'critic'...)",
    'get_parameters': "the weights are each Keras model's: agent.models[role].get_weights(); agent.save(directory) "
                      'keeps them with the optimizers',
    'set_parameters': "agent.models[role].set_weights(weights), or Agent.load(directory) / --weights for a save",
    'set_random_seed': 'the seed is given when the agent is built: PPO(env, seed=0), PPO.from_env(env_id, seed=0)',
    'num_timesteps': 'env steps taken, over all fits, are agent.steps (run.steps in a callback)',
    'replay_buffer': "an off-policy agent's replay buffer is agent.buffer (NumPy arrays, filled as it trains)",
    'save_replay_buffer': 'agent.save(directory, include_buffer=True) keeps the replay buffer with the agent',
    'load_replay_buffer': 'Agent.load(directory) takes back a replay buffer saved with include_buffer=True',
    'get_vec_normalize_env': 'observation statistics live in the agent (normalize_observations=True) and are '
                             'saved with it: agent.running_statistics()',
}

# Stable-Baselines3's functions that a user imports from the package, and where xagents has them.
SB3_FUNCTIONS: dict[str, str] = {
    'evaluate_policy': 'xagents.evaluate(agent, env, episodes=10) is evaluate_policy: it unpacks as mean, std',
    'make_vec_env': 'Agent.from_env(env_id, n_envs=N) builds the envs (xagents.envs.creation.create_envs for '
                    'the envs alone)',
}


def suggestion(name: str, known: set[str], flags: bool = False, elsewhere: dict[str, str] | None = None) -> str | None:
    """How to say ``name`` to something that takes the parameters ``known``: a Stable-Baselines3 name's
    xagents twin, else the closest known name; as a flag (``--name``) when ``flags``; None when nothing fits.
    ``elsewhere`` maps names taken elsewhere (fit's, for a constructor) to how to give them there."""
    aliases = SB3_NAMES.get(name, ())
    aliases = (aliases,) if isinstance(aliases, str) else aliases
    if not any(alias in known for alias in aliases):
        for owner_takes, how in BY_OWNER.get(name, {}).items():
            if owner_takes in known:
                return how[flags]
    if name in HOW:
        return HOW[name][flags]
    found = next((alias for alias in aliases if alias in known), None)
    if found is None and elsewhere:
        found = next((elsewhere[alias] for alias in aliases if alias in elsewhere), None)
        if found is not None:
            return found
    if found is None:
        found = next(iter(difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)), None)
    if found is None:
        return None
    return '--' + found.replace('_', '-') if flags else found


def unknown_parameter(owner: str, name: str, known: set[str], elsewhere: dict[str, str] | None = None) -> TypeError:
    """The error for a parameter that ``owner`` does not take, with a suggestion when there is one."""
    hint = suggestion(name, known, elsewhere=elsewhere)
    return TypeError(f'{owner} got an unexpected parameter {name!r}' + (f': did you mean {hint}?' if hint else ''))


def unknown_method(owner: str, name: str) -> AttributeError:
    """The error for an attribute ``owner`` lacks, pointing to the xagents way of a Stable-Baselines3 method."""
    how = SB3_METHODS.get(name)
    return AttributeError(f'{owner!r} object has no attribute {name!r}' + (f': {how}' if how else ''))

"""The ``xagents`` command: train, play, tune and plot, with flags derived from the agents."""
from __future__ import annotations

import argparse
import dataclasses
import contextlib
import gc
import logging
import os
import re
import shlex
import sys

import xagents
from xagents.training.distributed import WorkerError
from xagents.registry import AGENTS, agent_class, agent_cli, agent_package, location
from xagents.app.benchmark_command import DESCRIPTION as BENCHMARK_DESCRIPTION, run_benchmark_command
from xagents.app.flags import BACKEND_HELP, ArgumentParser, Flag, add_old_names, fail, flags_of
from xagents.app.named_networks import HELP as NETWORK_HELP, network_parameter, with_named_networks
from xagents.utils.console import (BACKENDS, BackendError, CommandOutput, interrupted, load_keras,
                                   stop_in_order_on_signals, use_backend)
from xagents.envs.presets import read_presets
from xagents.app.signatures import static_constructors, static_function

COMMANDS = {
    'train': 'train an agent on an environment',
    'play': 'play episodes with trained weights (screen, mp4, jpg frames)',
    'export': 'write a trained policy as a standalone SavedModel, TFLite or ONNX model',
    'plot': 'plot mean reward against steps and time from history files',
    'tune': 'search hyperparameters with Optuna (a local study file, or a database shared by workers)',
    'benchmark': BENCHMARK_DESCRIPTION,
    'check-env': 'check an environment: its spaces, the agents that take them, its action masks, random steps',
}
logger = logging.getLogger('xagents')
# Where a run's results go, said even with --quiet: a run writes there unasked (runs/...), or keeps nothing.
outputs_logger = logging.getLogger('xagents.outputs')
ENV_HELP = 'Gymnasium environment id, e.g. CartPole-v1 or PongNoFrameskip-v4'
RUNS = 'runs'  # a train command given no output writes into RUNS/AGENT/ENV_N (RL Zoo's logs/ALGO/ENV_N)
RUN_HISTORY, RUN_SAVES = 'history.parquet', 'saves'  # inside such a run folder
OUTPUTS = ('checkpoints', 'history_checkpoint', 'save_dir')  # what a run keeps, the run folder's or the user's
NO_SAVE_HELP = (f'keep nothing: no weights, history or saves (without --checkpoints, --history-checkpoint or '
                f'--save-dir, a run writes its history and its saves into a new run folder, {RUNS}/AGENT/ENV_N)')


def usage() -> str:
    lines = [f'xagents {xagents.__version__}: deep reinforcement learning agents on Keras 3 (TensorFlow, JAX or '
             'PyTorch)', '', 'usage: xagents <command> [<agent>] [flags]', '', 'commands:']
    width = max(map(len, COMMANDS)) + 2
    lines += [f'  {name:<{width}}{text}' for name, text in COMMANDS.items()]
    lines += ['', f'agents: {" ".join(AGENTS)}', '',
              'xagents <command> lists its flags; xagents <command> <agent> lists all that apply.']
    return '\n'.join(lines)


# Flags come from the signatures read from source (xagents.app.signatures): help and bad flags are
# answered without loading TensorFlow.
def env_flags() -> list[Flag]:
    return flags_of([static_function('xagents.envs.creation', 'create_envs')], skip={'seed'})


def base_flags(*methods: str, skip: set[str] | frozenset = frozenset()) -> list[Flag]:
    """Flags of ``BaseAgent``'s ``methods`` (``__init__``, ``fit``...), in order."""
    return flags_of([static_function('xagents.agent.base', f'BaseAgent.{method}') for method in methods], skip=skip)


def training_flags() -> list[Flag]:
    return base_flags('__init__', 'fit', 'load_weights', skip={'seed'})


def play_flags() -> list[Flag]:
    return base_flags('play', 'load_weights', skip={'env_id', 'seed'})


def export_flags() -> list[Flag]:
    return base_flags('export', 'load_weights')


COMMAND_FLAGS = {'play': play_flags, 'export': export_flags}  # besides train's


def agent_flags(agent: str) -> list[Flag]:
    """The flags of ``agent``'s own constructors (most derived first), below BaseAgent's."""
    return flags_of(static_constructors(*location(agent)))


def requested_env(argv: list[str]) -> str | None:
    """The ``--env`` given in ``argv``, if any (help then shows that env's tuned defaults)."""
    for index, word in enumerate(argv):
        if word == '--env' and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith('--env='):
            return word.split('=', 1)[1]
    return None


def build_parser(command: str, agent: str | None, env_id: str | None = None) -> ArgumentParser:
    """The parser of ``xagents COMMAND [AGENT]``; with ``env_id``, defaults tuned for it are the ones shown."""
    prog = f'xagents {command}' + (f' {agent}' if agent else '')
    face = agent_cli(agent) if agent else None  # the agent's cli.py: examples, its own flags' syntax
    examples = getattr(face, 'EXAMPLES', []) if command == 'train' else []
    parser = ArgumentParser(prog=prog, add_help=False, allow_abbrev=False, description=f'{COMMANDS[command]}.',
                            epilog='examples:\n' + '\n'.join(f'  {example}' for example in examples) if examples else None,
                            formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=40))
    checks = getattr(face, 'TYPES', {})
    general = parser.add_argument_group('general flags')
    general.add_argument('--env', required=agent is not None, default=argparse.SUPPRESS, help=ENV_HELP)
    # An agent's own signature gives a shared flag its default and help (PPO's lr is not BaseAgent's),
    # and with --env given, the defaults tuned for that env are the ones shown.
    own = {flag.name: flag for flag in agent_flags(agent)} if agent else {}
    try:
        tuned = read_presets(agent_package(agent), env_id) if agent and env_id else {}
    except ValueError:  # an unknown env: refused once the flags are parsed
        tuned = {}

    # Without an agent, a flag that agents give their own default (lr) shows no single default.
    per_agent = set() if agent else {flag.name for name in AGENTS for flag in agent_flags(name)}

    def shown(flag: Flag) -> Flag:
        if flag.name in per_agent:
            return dataclasses.replace(flag, default=None, help=f'{flag.help} (default: per agent, see xagents '
                                                                f'{command} AGENT)')
        flag = own.pop(flag.name, flag)
        if network_parameter(flag.name):
            flag = dataclasses.replace(flag, help=flag.help + NETWORK_HELP)
        if flag.name not in tuned:
            return flag
        return dataclasses.replace(flag, default=tuned[flag.name], help=f'{flag.help} [tuned for {env_id}]')

    for flag in env_flags():
        shown(flag).add_to(general)
    shown(next(flag for flag in base_flags('__init__') if flag.name == 'seed')).add_to(general)
    general.add_argument('--backend', choices=BACKENDS, default=argparse.SUPPRESS, help=BACKEND_HELP)
    general.add_argument('-h', '--help', action='help', help='show this help and exit')
    if command == 'train':
        group = parser.add_argument_group('training flags')
        for flag in training_flags():
            shown(flag).add_to(group)
        group.add_argument('--no-save', action='store_true', default=argparse.SUPPRESS, help=NO_SAVE_HELP)
    else:
        group = parser.add_argument_group(f'{command} flags')
        for flag in COMMAND_FLAGS[command]():
            flag.add_to(group)
    if agent:
        group = parser.add_argument_group(
            f'{agent} flags (per-env tuned defaults in xagents/{agent}/hyperparameters.json; '
            'explicit flags win)'
        )
        names = {action.dest for action in parser._actions} | set(getattr(face, 'NOT_FLAGS', ()))
        for flag in list(own.values()):
            if flag.name not in names:
                shown(flag).add_to(group, checks.get(flag.name))
    add_old_names(parser)
    return parser


def run_agent(command: str, agent: str, argv: list[str]) -> None:
    """Parse flags, build envs and the agent, then train or play."""
    import gymnasium as gym

    args = vars(build_parser(command, agent, requested_env(argv)).parse_args(argv))
    load_keras()  # once the flags parsed: a misspelt flag is refused without it
    from xagents.storage.checkpoints import NonFiniteError
    from xagents.envs.creation import EnvError, close_envs

    env_id = args.pop('env')
    weights = args.pop('weights', None)
    no_save = args.pop('no_save', False)
    command_names = {flag.name for flag in base_flags('fit')} if command == 'train' else {
        flag.name for flag in COMMAND_FLAGS[command]()} - {'weights'}
    run_args = {name: args.pop(name) for name in list(args) if name in command_names}
    if command != 'train':
        if not weights:
            fail(f'xagents {command} {agent}: error: --weights is required')
        if command == 'export' and 'path' not in run_args:
            fail(f'xagents export {agent}: error: --path is required')
        args['n_envs'] = 1
    quiet = run_args.get('quiet', args.get('quiet', False))
    configure_logging(quiet)
    prog, instance = f'xagents {command} {agent}', None
    stop_in_order_on_signals()  # a terminated run stops as on Ctrl-C
    try:
        args = with_named_networks(args)  # --model module:Name, imported once Keras has loaded
        if weights and len(weights) == 1 and os.path.isdir(weights[0]):  # a saved agent: its own settings
            instance = agent_class(agent).load(weights[0], env_id, **args)
        else:
            if command != 'train':  # plays or exports with the normalisation the weights were trained with
                args = {**agent_class(agent).trained_normalisation(weights), **args}
            instance = agent_class(agent).from_env(env_id, **args)
            if weights:
                instance.load_weights(weights)
        if command == 'train':
            folder = run_outputs(agent, env_id, argv, run_args, instance.run_defaults, no_save)
            try:
                instance.fit(**run_args)
            finally:
                for made in folder:  # a refused run leaves no folder (a run that wrote leaves its files)
                    with contextlib.suppress(OSError):
                        os.rmdir(made)
        elif command == 'export':
            logger.info('Policy written to %s', instance.export(**run_args))
            instance.envs.close()
            # The traced policy holds the agent in a reference cycle: freed now, or its ALE envs outlive the
            # garbage collector's freeze at exit and ale-py reports them leaked.
            instance = None
            gc.collect()
        else:
            played = instance.play(seed=args.get('seed'), **run_args)
            for reward in played.returns:
                logger.info('Episode reward: %.2f', reward)
            if len(played.returns) > 1:
                logger.info('Mean reward: %s', played)
    except KeyboardInterrupt:
        if instance is None or not instance.training_started:
            fail(f'{prog}: interrupted', 130)
        fail(f'{prog}: interrupted at step {instance.steps}{kept_files(instance, run_args, "saved")}', 130)
    except (EnvError, NonFiniteError) as error:  # the world failed mid-run: what was written before stays
        fail(f'{prog}: error: {error}{kept_files(instance, run_args)}', 1)
    except (ValueError, OSError, ImportError, gym.error.Error) as error:
        if instance is None or not instance.training_started:
            fail(f'{prog}: error: {error}')
        if not isinstance(error, OSError):
            raise
        # A write that failed during training (a full disk, say) left the previous file whole.
        written = f'could not write {error.filename}: {error.strerror}' if error.filename else str(error)
        fail(f'{prog}: error: {written}; the files written before are kept', 1)
    except WorkerError as error:
        fail(f'{prog}: error: {error}' + ('; the files written before are kept' if instance.training_started else ''), 1)
    finally:
        if instance is not None:
            close_envs(instance.envs)


def run_outputs(agent: str, env_id: str, argv: list[str], run_args: dict, run_defaults: dict,
                no_save: bool) -> list[str]:
    """Give a train command without outputs of its own (none of ``OUTPUTS``) a new run folder for its history and
    saves, as RL Zoo does, or keep nothing with ``no_save``; the run says which when it starts (after its checks).

    Returns:
        The folders made (the run folder first), for the caller to remove if left empty (a refused run).
    """
    from xagents.training.callbacks import OnStart

    given = [name for name in OUTPUTS if run_args.get(name) or run_defaults.get(name)]
    if no_save and given:
        raise ValueError(f'--no-save keeps nothing, and --{given[0].replace("_", "-")} asks to keep files: give one '
                         'of them')
    if given:
        return []
    made = [] if no_save else new_run_folder(agent, env_id)
    if no_save:
        line = 'Nothing of this run is kept (--no-save): no weights, history or saves'
    else:
        run_args['history_checkpoint'] = history = os.path.join(made[0], RUN_HISTORY)
        run_args['save_dir'] = saves = os.path.join(made[0], RUN_SAVES)
        frequency = run_args.get('save_frequency') or run_defaults.get('save_frequency')
        when = f'every {frequency} steps and when training ends' if frequency else 'when training ends'
        line = (f'Run folder {made[0]} (its history in {RUN_HISTORY}, the agent saved into {RUN_SAVES}/ {when}); go '
                f'on from its latest save with: {resume_command(agent, argv, history, saves)}')
    run_args['callbacks'] = [*run_args.get('callbacks', ()), OnStart(lambda run: outputs_logger.info(line))]
    return made


def new_run_folder(agent: str, env_id: str) -> list[str]:
    """Make the next free run folder ``runs/AGENT/ENV_N`` (N one more than the highest there; taken by making it,
    so runs started together take one each); return it and the folders made for it, deepest first.

    Raises:
        ValueError: no folder can be made there.
    """
    from xagents.storage.atomic import check_writable

    parent = os.path.join(RUNS, agent)
    check_writable(parent, directory=True)
    made, missing = [], parent
    while missing and not os.path.isdir(missing):
        made.append(missing)
        missing = os.path.dirname(missing)
    os.makedirs(parent, exist_ok=True)
    name = re.sub(r'[^\w.+-]+', '-', env_id)  # ALE/Pong-v5 -> ALE-Pong-v5, my_envs:Go-v0 -> my_envs-Go-v0
    pattern = re.compile(rf'{re.escape(name)}_(\d+)')
    number = max((int(match[1]) for entry in os.listdir(parent) if (match := pattern.fullmatch(entry))), default=0)
    while True:
        number += 1
        folder = os.path.join(parent, f'{name}_{number}')
        try:
            os.mkdir(folder)
        except FileExistsError:  # another run took it meanwhile
            continue
        return [folder, *made]


def resume_command(agent: str, argv: list[str], history: str, saves: str) -> str:
    """The command that goes on with a run from the latest save in ``saves``: the run's own flags without its
    ``--weights``, its history and save folder named, and that folder as ``--weights``."""
    words, skipping = [], False
    for word in argv:
        if word == '--weights':
            skipping = True
        elif not (skipping and not word.startswith('--')) and not word.startswith('--weights='):
            skipping = False
            words.append(word)
    return shlex.join(['xagents', 'train', agent, *words, '--history-checkpoint', history, '--save-dir', saves,
                       '--weights', saves])


def run_plot(argv: list[str]) -> None:
    parser = ArgumentParser(prog='xagents plot', description=COMMANDS['plot'] + '.', allow_abbrev=False)
    parser.add_argument('histories', nargs='+', help='parquet files written by --history-checkpoint')
    parser.add_argument('--labels', nargs='+', help='one legend label per file (default: file names)')
    parser.add_argument('--env', required=True, help=ENV_HELP + ' (the title)')
    parser.add_argument('--history-interval', type=int, default=1, help='plot every n-th episode (default: 1)')
    parser.add_argument('--output', required=True, help='image file to write, e.g. curves.png')
    if not argv:
        parser.print_help()
        return
    args = parser.parse_args(argv)
    from xagents.storage.history import plot_history

    from xagents.storage.atomic import check_writable

    labels = args.labels or [os.path.basename(path) for path in args.histories]
    try:
        for path in args.histories:
            if not os.path.isfile(path):
                raise FileNotFoundError(f'history file not found: {path}')
        if os.path.exists(args.output):
            raise ValueError(f'{args.output} exists: choose another --output')
        check_writable(args.output)
        plot_history(args.histories, labels, args.env, args.history_interval, args.output)
    except (ValueError, FileNotFoundError) as error:
        fail(f'xagents plot: error: {error}')
    print(f'Plot written to {args.output}')


def tune_parser(agent: str | None) -> ArgumentParser:
    """Flags of ``xagents tune [agent]``: search options from ``tune``'s signature, then the
    agent's tunable flags (tagged with how each is searched) and its other flags (one value)."""
    from xagents.app import search_space, tuning
    from xagents.app.flags import add_search_flag

    parser = ArgumentParser(prog='xagents tune' + (f' {agent}' if agent else ''), add_help=False,
                            description=f'{COMMANDS["tune"]}.',
                            formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=40))
    general = parser.add_argument_group('search flags')
    general.add_argument('--env', required=agent is not None, default=argparse.SUPPRESS, help=ENV_HELP)
    for flag in flags_of([tuning.tune], skip={'agent', 'search'}):
        flag.add_to(general)
    general.add_argument('--backend', choices=BACKENDS, default=argparse.SUPPRESS, help=BACKEND_HELP)
    general.add_argument('-h', '--help', action='help', help='show this help and exit')
    if agent:
        klass = agent_class(agent)
        flags, scales = search_space.hyperparameter_flags(klass), search_space.tunable(klass)
        group = parser.add_argument_group(f'{agent} tunable flags', search_space.GRAMMAR + '.')
        for name, scale in scales.items():
            add_search_flag(group, flags[name], search_space.SCALES[scale])
        group = parser.add_argument_group(
            f'other {agent} flags (one value; per-env defaults in xagents/{agent}/hyperparameters.json)'
        )
        for name, flag in flags.items():
            if name in scales:
                continue
            if flag.kind == 'bool':
                flag.add_to(group)
            else:
                add_search_flag(group, flag)
        add_old_names(parser)
    return parser


def run_tune(argv: list[str]) -> None:
    """Parse flags and run an Optuna search (``xagents.app.tuning.tune``)."""
    import optuna

    load_keras()
    from xagents.app import search_space, tuning
    if not argv or argv[0].startswith('-'):
        if argv and argv[0] not in ('-h', '--help'):
            fail(f'xagents tune: error: expected an agent ({", ".join(AGENTS)}) before flags, got {argv[0]}')
        tune_parser(None).print_help()
        print(f'\nagents: {" ".join(AGENTS)}  (xagents tune <agent> lists its tunable flags)')
        return
    agent, rest = argv[0], argv[1:]
    if agent not in AGENTS:
        fail(f'xagents tune: error: unknown agent {agent!r} (choose from {", ".join(AGENTS)})')
    try:
        parser = tune_parser(agent)
    except ValueError as error:
        fail(f'xagents tune {agent}: error: {error}')
    if not rest:
        parser.print_help()
        return
    args = vars(parser.parse_args(rest))
    env_id = args.pop('env')
    option_names = {flag.name for flag in flags_of([tuning.tune])}
    options = {name: args.pop(name) for name in list(args) if name in option_names}
    flags = search_space.hyperparameter_flags(agent_class(agent))
    search = {name: search_space.cli_search_value(flags[name], value) if isinstance(value, list) else value
              for name, value in args.items()}
    configure_logging(False)
    optuna.logging.set_verbosity(logging.WARNING)
    stop_in_order_on_signals()  # a terminated search stops as on Ctrl-C
    try:
        study = tuning.tune(agent_class(agent), env_id, search, **options)
    except ValueError as error:
        fail(f'xagents tune {agent}: error: {error}')
    except KeyboardInterrupt:
        raise SystemExit(130)
    states = [trial.state for trial in study.get_trials(deepcopy=False)]
    if optuna.trial.TrialState.COMPLETE not in states:
        fail(f'xagents tune {agent}: error: no trial of study {study.study_name} completed '
             f'({len(states)} failed or pruned)', 1)


def run_check_env(argv: list[str]) -> None:
    """Check an env (``xagents.check_env``) and print the report: status 1 when it breaks Gymnasium's API."""
    from xagents.app.flags import key_value

    parser = ArgumentParser(prog='xagents check-env', description=COMMANDS['check-env'] + '.', allow_abbrev=False)
    parser.add_argument('env', nargs='?', metavar='ENV_ID', help=ENV_HELP + ', or module:EnvName-v0 for your own')
    parser.add_argument('--env', dest='env_option', metavar='ENV_ID', help='the same, named as train names it')
    parser.add_argument('--env-kwargs', nargs='+', metavar='KEY=VALUE', type=key_value, default=[],
                        help='keyword arguments of gymnasium.make, e.g. continuous=true')
    parser.add_argument('--observation-keys', nargs='+', metavar='KEY',
                        help='keep these keys of Dict observations (as xagents train --observation-keys)')
    parser.add_argument('--steps', type=int, default=100, help='random steps to take (default: 100)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the resets and random actions (default: 0)')
    if not argv:
        parser.print_help()
        return
    args = parser.parse_args(argv)
    if (args.env is None) == (args.env_option is None):
        fail('xagents check-env: error: expected one env id, as ENV_ID or --env ENV_ID, got '
             + (f'{args.env} and {args.env_option}' if args.env else 'none'))
    if args.steps < 0:
        fail(f'xagents check-env: error: expected --steps >= 0, got {args.steps}')
    from xagents.envs.check_env import check_env

    try:
        result = check_env(args.env or args.env_option, dict(args.env_kwargs), args.observation_keys, steps=args.steps, seed=args.seed)
    except ValueError as error:
        fail(f'xagents check-env: error: {error}')
    print(result.report())
    if not result.ok:
        raise SystemExit(1)


def configure_logging(quiet: bool) -> None:
    logging.basicConfig(handlers=[CommandOutput()], format='%(message)s',
                        level=logging.WARNING if quiet else logging.INFO)
    outputs_logger.setLevel(logging.INFO)
    for library in ('tensorflow', 'absl', 'jax'):  # not their notes ('Assets written to ...', 'Unable to initialize ...')
        logging.getLogger(library).setLevel(logging.WARNING)


def kept_files(instance, run_args: dict, verb: str = 'of the last good point kept') -> str:
    """What a run that stopped early leaves, as it is on disk: '; weights (w.tf), history (h.parquet) and agent
    (sd/step-000000004096) saved' (``verb``; the agent is the latest save in the save_dir), and which asked-for files
    were not written at all."""
    from xagents.storage.saved import latest_save

    if instance is None or not instance.training_started:
        return ''
    save_dir = run_args.get('save_dir')
    asked = {'weights': list(run_args.get('checkpoints') or ()),
             'history': [run_args['history_checkpoint']] if run_args.get('history_checkpoint') else [],
             'agent': [save_dir] if save_dir else []}
    written = {name: [path for path in paths if os.path.exists(path)] for name, paths in asked.items()}
    written['agent'] = [latest for latest in [save_dir and latest_save(save_dir)] if latest]
    kept = [f'{name} ({", ".join(paths)})' for name, paths in written.items() if paths]
    missing = [name for name, paths in asked.items() if paths and not written[name]]
    return (f'; {listing(kept, "and")} {verb}' if kept else '') + (f'; no {listing(missing, "or")} written'
                                                                     if missing else '')


def listing(words: list[str], conjunction: str) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return f'{", ".join(words[:-1])} {conjunction} {words[-1]}' if len(words) > 1 else ''.join(words)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``xagents`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    if '' not in sys.path and os.getcwd() not in sys.path:  # --env my_envs:MyEnv-v0 finds ./my_envs.py, as python -m does
        sys.path.insert(0, os.getcwd())
    try:
        run_command(argv)
    except BackendError as error:  # the backend chosen is unknown, missing or broken: what installs it
        fail(f'xagents {argv[0]}: error: {error}')
    except KeyboardInterrupt:  # Ctrl-C before training started (loading TensorFlow, building envs)
        fail('xagents: interrupted', 130)
    except Exception as error:
        if not interrupted(error):
            raise
        fail('xagents: interrupted', 130)


def with_backend_chosen(command: str, argv: list[str]) -> list[str]:
    """``argv`` without its ``--backend NAME``, once that backend is chosen: before Keras loads, as
    ``KERAS_BACKEND`` chooses it (runs that a command starts in other processes inherit it)."""
    rest, name = [], None
    arguments = iter(argv)
    for argument in arguments:
        if argument == '--backend':
            name = next(arguments, None)
            if name is None:
                fail(f'xagents {command}: error: argument --backend: expected one argument')
        elif argument.startswith('--backend='):
            name = argument.partition('=')[2]
        else:
            rest.append(argument)
    if name is not None:
        try:
            use_backend(name)
        except ValueError as error:
            fail(f'xagents {command}: error: argument --backend: {error}')
    return rest


def run_command(argv: list[str]) -> None:
    """Dispatch ``argv`` to its command; checks that need no TensorFlow come before it loads."""
    if not argv or argv[0] in ('-h', '--help'):
        print(usage())
        return
    if argv[0] in ('-v', '--version'):
        print(f'xagents {xagents.__version__}')
        return
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        fail(f'xagents: error: unknown command {command!r} (choose from {", ".join(COMMANDS)})')
    rest = with_backend_chosen(command, rest)
    if command == 'plot':
        return run_plot(rest)
    if command == 'tune':
        return run_tune(rest)
    if command == 'benchmark':
        return run_benchmark_command(rest)
    if command == 'check-env':
        return run_check_env(rest)
    if not rest or rest[0].startswith('-'):
        if rest and rest[0] not in ('-h', '--help'):
            fail(f'xagents {command}: error: expected an agent ({", ".join(AGENTS)}) before flags, got {rest[0]}')
        build_parser(command, None).print_help()
        print(f'\nagents: {" ".join(AGENTS)}  (xagents {command} <agent> lists its flags)')
        return
    agent, rest = rest[0], rest[1:]
    if agent not in AGENTS:
        fail(f'xagents {command}: error: unknown agent {agent!r} (choose from {", ".join(AGENTS)})')
    if not rest:
        build_parser(command, agent).print_help()
        return
    run_agent(command, agent, rest)


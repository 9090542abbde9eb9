"""A saved agent: one directory holding a manifest (``agent.json``) and the files it names.

Every save writes its model (and replay buffer) files under new names, then replaces the manifest
atomically, then deletes the files no manifest names. A kill at any moment therefore leaves a
manifest that names a complete set: the new one, or the previous one; what else it leaves (hidden
temporaries, files no manifest names yet) the next save into the directory, or the next run of its
``save_dir``, removes (:func:`remove_interrupted_save`).
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import re
import zlib
from typing import Any

from xagents.version import __version__
from xagents.storage.atomic import atomic_write, stale_temporaries
from xagents.envs.creation import ENV_PARAMETERS
from xagents.storage.readback import check_fields, damaged, read_json
from xagents.utils.validation import RENAMED, check_value

FORMAT_VERSION = 1  # raised when a saved directory changes in a way older versions cannot read
MANIFEST = 'agent.json'
SAVED_FILE = re.compile(r'^[\w-]+-\d{12}-[0-9a-f]{8}\.npz$')  # what saves write beside the manifest
# The manifest's fields and what each may be (see readback.JSON_KINDS).
FIELDS = {
    'format_version': ('an integer',), 'agent': ('a string',), 'identity': ('an object',), 'steps': ('an integer',),
    'files': ('an object',), 'hyperparameters': ('an object',), 'unsaved': ('a list',),
    'env': ('an object', 'null'), 'training_state': ('an object',),
}
FIX = 'load another save'
STEP_SAVE = re.compile(r'^step-(\d+)$')  # the periodic and final saves of a save_dir
SCORE_FIX = 'delete it to let the next evaluation replace best-eval, however it scores'
logger = logging.getLogger('xagents')


def write_manifest(directory: str, manifest: dict[str, Any]) -> None:
    """Replace the manifest of ``directory`` in one step, then remove the files it no longer names."""
    manifest = {'format_version': FORMAT_VERSION, 'xagents_version': __version__, **manifest}
    with atomic_write(os.path.join(directory, MANIFEST)) as file:
        file.write(json.dumps(manifest, indent=1).encode())
    remove_unnamed(directory, set(manifest.get('files', {}).values()))


def read_manifest(directory: str) -> dict[str, Any]:
    """The manifest of a saved agent, checked to be one this version reads, naming files that exist.

    Raises:
        FileNotFoundError: ``directory`` holds no saved agent.
        ValueError: the manifest is damaged (not JSON, a field missing or of another kind, a file it
            names missing) or written by a newer format version.
    """
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'no saved agent in {directory} (expected {path}, written by agent.save)')
    manifest = read_json(path, {'format_version': FIELDS['format_version']}, FIX)
    if manifest['format_version'] > FORMAT_VERSION:
        raise ValueError(f'{directory} was saved in format {manifest["format_version"]} by a newer xagents; this one '
                         f'reads up to {FORMAT_VERSION}: upgrade xagents to load it')
    check_fields(path, manifest, FIELDS, FIX)
    names = manifest['files'].values()
    wrong = [name for name in names if not (isinstance(name, str) and SAVED_FILE.match(name))]
    if wrong:
        raise damaged(path, f'expected files named as save names them (model-000000001536-cd73761e.npz), got '
                            f'{json.dumps(wrong[0])[:40]}', FIX)
    if not all(isinstance(name, str) for name in manifest['unsaved']):
        raise damaged(path, f'expected "unsaved" to list names, got {json.dumps(manifest["unsaved"])[:40]}', FIX)
    if manifest['env'] is not None and not isinstance(manifest['env'].get('env_id'), str):
        raise damaged(path, 'expected the env to have an "env_id" string', FIX)
    for name in names:
        if not os.path.isfile(os.path.join(directory, name)):
            raise ValueError(f'{directory} is incomplete: {name} is missing; {FIX}')
    return manifest


def latest_save(directory: str) -> str | None:
    """The save of the highest step among the whole ``step-N`` saves of the save_dir ``directory`` (those with a
    manifest), or None."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    steps = {int(match[1]): name for name in names if (match := STEP_SAVE.match(name))
             and os.path.isfile(os.path.join(directory, name, MANIFEST))}
    return os.path.join(directory, steps[max(steps)]) if steps else None


def saved_agent(path: str) -> str:
    """``path``, a directory written by ``save``; or, given a save_dir (``fit``'s, holding ``step-N`` saves and no
    manifest), its latest save, which a run resumes from."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return path
    latest = latest_save(path)
    if latest is None:
        return path
    logger.info('Loading %s, the latest save in %s', latest, path)
    return latest


def write_score(path: str, eval_reward: float, step: int) -> None:
    """Write best-eval's score (``best-eval.json``): its evaluation reward and step, with a CRC-32 of both, so a
    changed byte is refused on resume rather than read as another score."""
    record = {'eval_reward': float(eval_reward), 'step': int(step)}
    record['crc32'] = zlib.crc32(json.dumps(record, sort_keys=True).encode())
    with atomic_write(path) as file:
        file.write(json.dumps(record).encode())


def read_score(path: str) -> float:
    """The evaluation reward of best-eval's score written by :func:`write_score`, checked.

    Raises:
        ValueError: the record is not JSON, lacks a field, holds one of another kind, one more than it should, a
            score that is not finite, or a CRC-32 that does not match (a changed byte). A record without a CRC-32
            (written before records had one) is read without that check.
    """
    fields = {'eval_reward': ('a number',), 'step': ('an integer',)}
    record = read_json(path, fields, SCORE_FIX)
    extra = sorted(set(record) - {*fields, 'crc32'})
    if extra:
        raise damaged(path, f'expected the fields eval_reward, step and crc32, got "{extra[0][:40]}" too', SCORE_FIX)
    if isinstance(record['eval_reward'], float) and not math.isfinite(record['eval_reward']):
        raise damaged(path, f'expected "eval_reward" to be finite, got {record["eval_reward"]}', SCORE_FIX)
    if 'crc32' in record:
        check_fields(path, record, {'crc32': ('an integer',)}, SCORE_FIX)
        crc32 = zlib.crc32(json.dumps({name: record[name] for name in fields}, sort_keys=True).encode())
        if record['crc32'] != crc32:
            raise damaged(path, f'expected "crc32" to be {crc32}, the CRC-32 of its fields, got {record["crc32"]}',
                          SCORE_FIX)
    return float(record['eval_reward'])


def saved_file(directory: str, manifest: dict[str, Any], role: str) -> str:
    """The path of ``role``'s file (a model's, or ``buffer``) in the save ``directory``.

    Raises:
        ValueError: the manifest names no file for ``role``.
    """
    if role not in manifest['files']:
        raise damaged(os.path.join(directory, MANIFEST), f'expected "files" to name the {role} file, found none', FIX)
    return os.path.join(directory, manifest['files'][role])


def check_settings(directory: str, manifest: dict[str, Any], agent: type) -> None:
    """Refuse a manifest whose hyperparameters or env settings this version's ``agent`` class does not take
    (a save of another xagents version), or whose hyperparameters break their rules (an edit).

    Raises:
        ValueError: naming the manifest, the setting and what to do.
    """
    path = os.path.join(directory, MANIFEST)
    saved_by = f'xagents {manifest["xagents_version"]}' if 'xagents_version' in manifest else 'another version'
    # What load passes on: the constructors' parameters, and the run settings fit takes (see run_settings_apart).
    functions = [agent.fit, *(klass.__init__ for klass in agent.__mro__ if '__init__' in vars(klass))]
    annotations = {name: str(parameter.annotation) for function in functions
                   for name, parameter in inspect.signature(function).parameters.items()}
    parameters = agent.parameter_names() | set(annotations) - {'self', 'envs', 'kwargs'}
    for kind, settings, known in (('hyperparameter', manifest['hyperparameters'], parameters),
                                  ('env setting', manifest['env'] or {}, {'env_id', *ENV_PARAMETERS})):
        for name in settings:
            if name not in known and RENAMED.get(name) not in known:
                raise ValueError(f'{path} lists the {kind} {name!r}, which {agent.__name__} of xagents {__version__} '
                                 f'does not take (saved by {saved_by}): load it with that version, or delete {name!r} '
                                 f'from {path} to load it with this one')
    for name, value in manifest['hyperparameters'].items():
        try:
            check_value(name, value, annotations.get(name, ''))
        except ValueError as error:
            raise damaged(path, str(error), FIX) from None


def remove_unnamed(directory: str, named: set[str]) -> list[str]:
    """Delete the files of saves in ``directory`` that are not in ``named``, and the temporaries of killed
    writes of a save; return their paths."""
    removed = []
    temporaries = {name for name, target in stale_temporaries(directory).items()
                   if target == MANIFEST or SAVED_FILE.match(target)}
    for name in os.listdir(directory):
        if (SAVED_FILE.match(name) and name not in named) or name in temporaries:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
                removed.append(os.path.join(directory, name))
    return removed


def remove_interrupted_save(directory: str) -> list[str]:
    """Delete what saves into ``directory`` killed midway left: temporaries and files no manifest names
    (all of a first save's, the directory too if that empties it). A damaged manifest's files are kept.
    Returns the paths removed."""
    try:
        named = set(read_manifest(directory)['files'].values())
    except FileNotFoundError:
        named = set()
    except ValueError:
        named = {name for name in os.listdir(directory) if SAVED_FILE.match(name)}
    removed = remove_unnamed(directory, named)
    if removed and not os.listdir(directory):
        os.rmdir(directory)
        removed.append(directory)
    return removed


def json_values(values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``values`` split into those JSON can hold and the names of the others (a Keras model object)."""
    kept, others = {}, []
    for name, value in values.items():
        try:
            json.dumps(value)
            kept[name] = value
        except (TypeError, ValueError):
            others.append(name)
    return kept, others

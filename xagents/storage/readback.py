"""Reading back what xagents wrote: a damaged or edited file is one ValueError naming it and what is wrong.

Atomic writes (``xagents.storage.atomic``) keep a kill from tearing a file; these checks cover what happens to a
file afterwards (a bad disk or copy, a hand edit). Arrays (``.npz``) are read only after every member
has passed the CRC-32 the zip format stores for it, which catches any changed byte of a member's
content, header included (NumPy alone checks it only when it reads a member to its end). The zip
directory itself has no checksum, and a changed length in it can hide the members after it: readers
check that a file holds every array it must (``checkpoints.LAST_ENTRY``, ``buffer_state.restore_buffer_state``).
Together these refuse every single changed byte that would change what is read (benchmarks/damaged_files.py),
with no digest to record, so they cover weights files that have no manifest too.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import numpy as np

# What a JSON field may hold, by the words messages use for it.
JSON_KINDS = {
    'an integer': lambda value: isinstance(value, int) and not isinstance(value, bool),
    'a number': lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    'a string': lambda value: isinstance(value, str),
    'an object': lambda value: isinstance(value, dict),
    'a list': lambda value: isinstance(value, list),
    'null': lambda value: value is None,
}


def damaged(path: str, problem: str, fix: str) -> ValueError:
    """The error for a file that cannot be what xagents wrote there: ``path``, ``problem``, then ``fix``."""
    problem = ' '.join(problem.split())  # one line, whatever a library's message held
    return ValueError(f'{path} is damaged: {problem}; {fix}')


def read_json(path: str, fields: dict[str, tuple[str, ...]], fix: str) -> dict[str, Any]:
    """The JSON object in ``path``, checked to hold ``fields`` (name: the kinds of :data:`JSON_KINDS` it may be).

    Raises:
        ValueError: the file is not JSON, not an object, or lacks a field or holds one of another kind.
    """
    try:
        with open(path, encoding='utf-8') as file:
            record = json.load(file)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise damaged(path, f'expected JSON, got {error}', fix) from None
    if not isinstance(record, dict):
        raise damaged(path, f'expected a JSON object, got {type(record).__name__}', fix)
    check_fields(path, record, fields, fix)
    return record


def check_fields(path: str, record: dict[str, Any], fields: dict[str, tuple[str, ...]], fix: str) -> None:
    """Raise the error of :func:`damaged` unless ``record``, read from ``path``, holds ``fields`` (see
    :func:`read_json`)."""
    for name, kinds in fields.items():
        if name not in record:
            raise damaged(path, f'expected a field "{name}", found none', fix)
        if not any(JSON_KINDS[kind](record[name]) for kind in kinds):
            raise damaged(path, f'expected "{name}" to be {" or ".join(kinds)}, got {json.dumps(record[name])[:40]}',
                          fix)


def read_arrays(path: str, fix: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive ``path`` (written by ``np.savez``), each member's CRC-32 checked first.

    Raises:
        FileNotFoundError: there is no file ``path``.
        ValueError: the file is not a whole archive of arrays (truncated, a byte changed, not a zip).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'file not found: {path}')
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():  # ZipFile.testzip, keeping the reason of a failure
                with archive.open(member) as data:
                    while data.read(1 << 24):
                        pass
        with np.load(path, allow_pickle=False) as archive:
            return dict(archive)
    except (PermissionError, MemoryError):  # the file may be whole: not damage
        raise
    except Exception as error:  # zipfile, zlib and NumPy raise many unrelated types for a damaged archive
        raise damaged(path, str(error) or type(error).__name__, fix) from None

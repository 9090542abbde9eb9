"""A saved agent: one directory holding a manifest (``agent.json``) and the files it names.

Every save writes its model (and replay buffer) files under new names, then replaces the manifest
atomically, then deletes the files no manifest names. A kill at any moment therefore leaves a
manifest that names a complete set: the new one, or the previous one.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from xagents.utils.atomic import atomic_write

FORMAT_VERSION = 1  # raised when a saved directory changes in a way older versions cannot read
MANIFEST = 'agent.json'
SAVED_FILE = re.compile(r'^[\w-]+-\d{12}-[0-9a-f]{8}\.npz$')  # what saves write beside the manifest


def write_manifest(directory: str, manifest: dict[str, Any]) -> None:
    """Replace the manifest of ``directory`` in one step, then remove the files it no longer names."""
    manifest = {'format_version': FORMAT_VERSION, **manifest}
    with atomic_write(os.path.join(directory, MANIFEST)) as file:
        file.write(json.dumps(manifest, indent=1).encode())
    named = set(manifest.get('files', {}).values())
    for name in os.listdir(directory):
        if SAVED_FILE.match(name) and name not in named:
            os.remove(os.path.join(directory, name))


def read_manifest(directory: str) -> dict[str, Any]:
    """The manifest of a saved agent, checked to be one this version reads.

    Raises:
        FileNotFoundError: ``directory`` holds no saved agent.
        ValueError: the manifest is unreadable or written by a newer format version.
    """
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'no saved agent in {directory} (expected {path}, written by agent.save)')
    try:
        with open(path, encoding='utf-8') as file:
            manifest = json.load(file)
        version = int(manifest['format_version'])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f'{path} is not an xagents manifest') from None
    if version > FORMAT_VERSION:
        raise ValueError(f'{directory} was saved in format {version} by a newer xagents; this one reads up to '
                         f'{FORMAT_VERSION}: upgrade xagents to load it')
    for name in manifest.get('files', {}).values():
        if not os.path.isfile(os.path.join(directory, name)):
            raise ValueError(f'{directory} is incomplete: {name} is missing')
    return manifest


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

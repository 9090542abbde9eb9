"""Change single bytes of a weights file and of a saved replay buffer, and truncate them: what does loading do?

A PPO CartPole-v1 weights file (``--checkpoints``) and a DQN save with its replay buffer are written in a
temporary directory. Each byte of every zip and ``.npy`` header, of the central directory and of the end
record, and every ``--stride``-th byte of array data, is changed in turn (``--bits``: XOR mask), and the copy
is loaded as the command line loads it (``load_weights``, ``load_buffer``); so is a copy truncated at every
``10 * stride``-th length and at each of the last 200. Every outcome is one of: refused with a ValueError,
read identical (the byte was in a field the zip reader does not use: times, attributes, the local
header's copies of sizes and CRC), or, which must never happen, read different or another exception.

    python benchmarks/damaged_files.py --stride 31 --bits 0xff
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import struct
import tempfile
import zipfile

import numpy as np

from xagents import DQN, PPO
from xagents.replay.buffer_state import fields


def offsets(path: str, stride: int) -> list[int]:
    """Every byte of headers and the central directory; every ``stride``-th byte of array data."""
    raw = open(path, 'rb').read()
    with zipfile.ZipFile(path) as archive:
        chosen = set(range(archive.start_dir, len(raw)))
        for member in archive.infolist():
            start = member.header_offset
            data = start + 30 + sum(struct.unpack('<HH', raw[start + 26:start + 30]))
            chosen |= set(range(start, data + min(128, member.file_size)))  # with the .npy header
            chosen |= set(range(data + 128, data + member.file_size, stride))
    return sorted(chosen)


def changed(raw: bytes, offset: int, bits: int) -> bytes:
    copy = bytearray(raw)
    copy[offset] ^= bits
    return bytes(copy)


def scan(path: str, load, state, restore_good, stride: int, bits: int) -> dict[str, collections.Counter]:
    """Outcomes of loading each change of ``path`` (``load``), against the arrays ``state`` gives for it whole."""
    raw, good = open(path, 'rb').read(), state()
    copy = os.path.join(os.path.dirname(path), 'changed.npz')
    lengths = sorted(set(range(0, len(raw), 10 * stride)) | set(range(len(raw) - 200, len(raw))))
    cases = [*(('changed bytes', offset) for offset in offsets(path, stride)), *(('truncations', n) for n in lengths)]
    outcomes = {'changed bytes': collections.Counter(), 'truncations': collections.Counter()}
    for kind, at in cases:
        with open(copy, 'wb') as file:
            file.write(changed(raw, at, bits) if kind == 'changed bytes' else raw[:at])
        try:
            load(copy)
            same = all(np.array_equal(a, b) for a, b in zip(state(), good))
            outcomes[kind]['read identical' if same else 'READ DIFFERENT'] += 1
        except ValueError:
            outcomes[kind]['refused (ValueError)'] += 1
        except Exception as error:  # noqa: BLE001 - what must never happen, counted by type
            outcomes[kind][f'OTHER: {type(error).__name__}'] += 1
        restore_good()
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--stride', type=int, default=31, help='change every stride-th byte of array data')
    parser.add_argument('--bits', type=lambda text: int(text, 0), default=0xff, help='XOR mask of a change')
    args = parser.parse_args()
    directory = tempfile.mkdtemp()
    weights = os.path.join(directory, 'w.tf')
    ppo = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True, checkpoints=[weights])
    ppo.fit(max_steps=2048)
    ppo.save_models()
    dqn = DQN.from_env('CartPole-v1', seed=0, quiet=True, buffer_initial_size=1000)
    dqn.fit(max_steps=300)
    dqn.save(os.path.join(directory, 'dqn'), include_buffer=True)
    (buffer,) = glob.glob(os.path.join(directory, 'dqn', 'buffer-*.npz'))

    def model_state():
        return [variable.numpy().copy() for variable in ppo.model.weights + ppo.optimizers['model'].variables]

    def buffer_state():
        return [np.asarray(getattr(owner, name)).copy() for owner, name in fields(dqn.buffer).values()]

    for label, path, load, state, restore in (
            ('weights file', weights, lambda copy: ppo.load_weights([copy]), model_state,
             lambda: ppo.load_weights([weights])),
            ('replay buffer', buffer, dqn.load_buffer, buffer_state, lambda: dqn.load_buffer(buffer))):
        restore()
        for kind, counts in scan(path, load, state, restore, args.stride, args.bits).items():
            print(f'{label} ({os.path.getsize(path):,} bytes), {kind} ({sum(counts.values()):,}): '
                  + ', '.join(f'{outcome} {count:,}' for outcome, count in sorted(counts.items())))


if __name__ == '__main__':
    main()

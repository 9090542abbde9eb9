"""Export a deterministic policy to a SavedModel, a TFLite flatbuffer or an ONNX file, and load it back.

A policy is a function from a batch of raw observations to a batch of env-ready actions, in ``keras.ops``; it may
close over variables and Keras models. TensorFlow writes every format (:mod:`xagents.storage.export_tensorflow`); on
PyTorch, PyTorch's own exporter writes ONNX in the process (:mod:`xagents.storage.export_torch`).

Every export takes observations of the env's dtype with a dynamic batch dimension (named ``observations``) and gives
actions (named ``actions``): int64 for integer actions, float32 for real ones. A policy of Dict observations takes
one input per key, named by the key, in the key's dtype (Discrete keys as int64 indices) and shape. An export asked
for masks (``mask_size``) also takes ``action_mask``, ``(batch, n)`` booleans of the allowed actions. A recurrent
policy's export (``state_size``) takes ``episode_start`` ``(batch,)`` booleans and ``state`` ``(batch, S)`` floats
last, and gives ``next_state`` after ``actions``: the ``state`` of the next observations. TFLite keeps the dynamic
batch as a -1 in its shape signature, so its interpreter is resized to each new batch size by :func:`load_exported`.

Outputs are written beside ``path`` under a temporary name and renamed into place, so a killed export
leaves either nothing at ``path`` or a whole export (and perhaps a hidden ``.NAME.XXXXXXXX`` sibling).
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import gymnasium as gym
import numpy as np

from xagents.envs.masks import as_mask
from xagents.storage.export_parts import (INPUT_NAME, MASK_NAME, NEXT_STATE_NAME, OUTPUT_NAME, SIGNATURE_KEY,
                                          STARTS_NAME, STATE_NAME, check_destination, input_specs, require,
                                          write_file)

FORMATS = ('saved_model', 'tflite', 'onnx')


def format_of(path: str, format: str | None) -> str:
    """``format``, or when None the one ``path`` names: ``.tflite``, ``.onnx``, else a SavedModel directory."""
    if format is not None:
        return format
    extension = os.path.splitext(path)[1].lower().lstrip('.')
    return extension if extension in ('tflite', 'onnx') else 'saved_model'


def _check_format(format: str) -> None:
    """Refuse a format that is not one of FORMATS, naming those that are."""
    if format not in FORMATS:
        raise ValueError(f'unknown export format {format!r}: use one of {", ".join(FORMATS)}')


def export_policy(
    policy: Callable, observation_space: gym.spaces.Space, path: str, format: str | None = None,
    mask_size: int | None = None, state_size: int | None = None, modules: Sequence = (),
) -> str:
    """Write ``policy`` (``keras.ops`` on the running backend) as a standalone export at ``path`` in ``format``
    (default: from the path, see :func:`format_of`); return the path written. With ``mask_size``, the export takes a
    second input, ``action_mask`` ``(batch, mask_size)`` booleans, given to ``policy`` after the observations. With
    ``state_size``, ``policy`` is recurrent: it takes ``memory=(episode_start, state)`` and returns
    ``(actions, state)``. TensorFlow writes every format; on PyTorch, ONNX is written in this process by PyTorch's
    exporter, which takes the weights of ``modules`` (the Keras models ``policy`` reads) as the export's own.

    Raises:
        ValueError: ``format`` is not one of FORMATS, or ``path`` exists.
        TypeError: ``observation_space`` is not a Box, Discrete, MultiBinary, MultiDiscrete or Dict of them.
        ImportError: the converter that ``format`` needs is not installed.
    """
    format = format_of(path, format)
    _check_format(format)
    check_destination(path)
    specs = input_specs(observation_space)
    if mask_size is not None:
        if MASK_NAME in specs:
            raise ValueError(f'an export with action masks names its mask input {MASK_NAME!r}, which is a key of '
                             'these observations')
        specs[MASK_NAME] = ((None, mask_size), 'bool')
    if state_size is not None:
        taken = {STARTS_NAME, STATE_NAME} & set(specs)
        if taken:
            raise ValueError(f'a recurrent export names its inputs {STARTS_NAME!r} and {STATE_NAME!r}, and '
                             f'{sorted(taken)[0]!r} is a key of these observations')
        specs[STARTS_NAME] = ((None,), 'bool')
        specs[STATE_NAME] = ((None, state_size), 'float32')
    from xagents import backend

    if format == 'onnx' and backend.NAME == 'torch':
        from xagents.storage.export_torch import onnx_bytes

        write_file(path, onnx_bytes(policy, specs, modules))
    else:
        from xagents.storage.export_tensorflow import write

        write(policy, specs, path, format)
    return path


Shapes = dict[str, tuple[int | None, ...]]  # an export's inputs by name: their shapes, None where dynamic


def _load_saved_model(path: str) -> tuple[Callable[[dict], tuple], Shapes]:
    """Run the SavedModel's ``serving_default`` signature with TensorFlow."""
    from xagents.utils.quiet_tensorflow import tf

    loaded = tf.saved_model.load(path)
    signature = loaded.signatures[SIGNATURE_KEY]

    def run(inputs: dict[str, np.ndarray]) -> tuple:
        _ = loaded  # the signature reads variables that live as long as the loaded object
        outputs = signature(**{name: tf.convert_to_tensor(value) for name, value in inputs.items()})
        return tuple(outputs[name].numpy() for name in (OUTPUT_NAME, NEXT_STATE_NAME) if name in outputs)

    return run, {name: tuple(spec.shape.as_list()) for name, spec in signature.structured_input_signature[1].items()}


def _load_tflite(path: str) -> tuple[Callable[[dict], tuple], Shapes]:
    """Run the flatbuffer's signature with the LiteRT interpreter (which resizes its inputs to each batch)."""
    litert = require('ai_edge_litert.interpreter', 'running a tflite export')
    interpreter = litert.Interpreter(model_path=path)
    interpreter.allocate_tensors()
    runner = interpreter.get_signature_runner()
    details = runner.get_input_details()

    def run(inputs: dict[str, np.ndarray]) -> tuple:
        return tuple(output.copy() for output in runner(**inputs).values())

    return run, {name: tuple(None if size < 0 else int(size) for size in detail['shape_signature'])
                 for name, detail in details.items()}


def _load_onnx(path: str) -> tuple[Callable[[dict], tuple], Shapes]:
    """Run the ONNX file with onnxruntime on the CPU."""
    onnxruntime = require('onnxruntime', 'running an onnx export')
    session = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
    outputs = [value.name for value in session.get_outputs()]

    def run(inputs: dict[str, np.ndarray]) -> tuple:
        return tuple(session.run(outputs, inputs))

    return run, {value.name: tuple(size if isinstance(size, int) else None for size in value.shape)
                 for value in session.get_inputs()}


def _check_inputs(inputs: dict[str, np.ndarray], shapes: Shapes) -> None:
    """Refuse inputs the export does not take, in one line naming the input and the shape it takes (a runtime
    would fail deep in its graph, or resize a TFLite input to anything)."""
    if set(inputs) != set(shapes):
        raise ValueError(f'this export takes {", ".join(sorted(shapes))}, got {", ".join(sorted(inputs))}')
    for name, shape in shapes.items():
        got = np.shape(inputs[name])
        if len(got) != len(shape) or any(size is not None and size != each for size, each in zip(shape, got)):
            expected = '(' + ', '.join('batch' if size is None else str(size) for size in shape) + (
                ',)' if len(shape) == 1 else ')')
            raise ValueError(f'this export takes {name} shaped {expected}, got shape {got}')


def _named(observations: np.ndarray | dict[str, np.ndarray], action_mask: np.ndarray | None = None
           ) -> dict[str, np.ndarray]:
    """An export's inputs by name: ``observations`` (or one per key of Dict observations), and the action
    mask as booleans when given."""
    inputs = ({name: np.asarray(value) for name, value in observations.items()} if isinstance(observations, dict)
              else {INPUT_NAME: np.asarray(observations)})
    if action_mask is not None:
        inputs[MASK_NAME] = as_mask(action_mask, None, f"the export's {MASK_NAME}")
    return inputs


def load_exported(path: str, format: str | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Load an export with its own runtime (``format`` as :func:`format_of` reads it) and return a NumPy
    function from a batch (and its action masks, for an export that takes them) to its actions; a recurrent
    policy's takes ``state`` and ``episode_start`` too (default: episodes beginning, zero states) and returns
    ``(actions, state)``."""
    format = format_of(path, format)
    _check_format(format)
    if not os.path.exists(path):
        raise ValueError(f'no {format} export at {path}: export the policy there first')
    loaders = {'saved_model': _load_saved_model, 'tflite': _load_tflite, 'onnx': _load_onnx}
    run, shapes = loaders[format](path)
    state_size = shapes[STATE_NAME][-1] if STATE_NAME in shapes else None

    def act(observations: np.ndarray | dict[str, np.ndarray], action_mask: np.ndarray | None = None,
            state: np.ndarray | None = None, episode_start: np.ndarray | None = None):
        inputs = _named(observations, action_mask)
        if state_size is None:
            if state is not None or episode_start is not None:
                raise ValueError('this export has no memory: state and episode_start are for recurrent policies')
            _check_inputs(inputs, shapes)
            return run(inputs)[0]
        batch = len(next(iter(inputs.values())))
        inputs[STARTS_NAME] = np.broadcast_to(np.asarray(state is None if episode_start is None else episode_start,
                                                         bool).reshape(-1), (batch,)).copy()
        inputs[STATE_NAME] = np.zeros((batch, state_size), np.float32) if state is None else np.asarray(state, np.float32)
        _check_inputs(inputs, shapes)
        actions, next_state = run(inputs)
        return actions, next_state

    return act

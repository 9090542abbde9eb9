"""The TensorFlow side of :mod:`xagents.storage.export`: a policy traced by ``tf.function`` and written as a
SavedModel, a TFLite flatbuffer (TFLite's builtin ops) or an ONNX file (tf2onnx)."""
from __future__ import annotations

import contextlib
import logging
from types import ModuleType
from typing import Callable

from xagents.storage.export_parts import (NEXT_STATE_NAME, ONNX_OPSET, OUTPUT_NAME, SIGNATURE_KEY, Spec, call_policy,
                                          require, write_directory, write_file)
from xagents.utils.quiet_tensorflow import tf


def write(policy: Callable[..., tf.Tensor], specs: dict[str, Spec], path: str, format: str) -> None:
    """Trace ``policy`` on ``specs`` and write it at ``path`` in ``format``."""
    if format == 'onnx':
        require('tf2onnx', 'exporting to onnx')
    module = _policy_module(policy, specs)
    if format == 'saved_model':
        write_directory(path, lambda directory: _save_model(module, directory))
    elif format == 'tflite':
        write_file(path, _tflite_bytes(module))
    else:
        write_file(path, _onnx_bytes(module.act.get_concrete_function()))


def _action_dtype(actions: tf.Tensor) -> tf.Tensor:
    """Give integer actions as int64 and real ones as float32, whatever the policy computed them in."""
    if actions.dtype.is_integer:
        return tf.cast(actions, tf.int64)
    if actions.dtype.is_floating:
        return tf.cast(actions, tf.float32)
    raise ValueError(f'a policy must return integer or floating actions, not {actions.dtype.name}')


def _policy_module(policy: Callable[..., tf.Tensor], specs: dict[str, Spec]) -> tf.Module:
    """Trace ``policy`` once on ``specs`` (its inputs by name, in order: the observations, one per key of a
    Dict, then the action masks if asked) into a module that also owns the variables it reads; a policy of
    several observation inputs takes them as a dict, and the masks after them.

    SavedModel and TFLite refuse functions that read variables no saved object tracks.
    """
    names = list(specs)
    signature = [tf.TensorSpec(shape, tf.as_dtype(dtype), name=name) for name, (shape, dtype) in specs.items()]

    def act(*inputs: tf.Tensor) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
        actions, next_state = call_policy(policy, names, inputs)
        actions = tf.identity(_action_dtype(tf.convert_to_tensor(actions)), name=OUTPUT_NAME)
        return actions if next_state is None else (actions, tf.identity(next_state, name=NEXT_STATE_NAME))

    module = tf.Module()
    module.act = tf.function(act, input_signature=signature)
    module.policy_variables = list(module.act.get_concrete_function().variables)
    def serve(*inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        # A SavedModel signature runs whatever shapes it is given: a state of another size would fail deep in the
        # graph; EnsureShape names the input and the shape it takes instead.
        inputs = [tf.ensure_shape(value, spec.shape, name=spec.name) for value, spec in zip(inputs, signature)]
        return dict(zip((OUTPUT_NAME, NEXT_STATE_NAME), tf.nest.flatten(module.act(*inputs))))

    module.serve = tf.function(serve, input_signature=signature)
    return module


def _save_model(module: tf.Module, directory: str) -> None:
    """Write a SavedModel whose ``serving_default`` signature maps observations to actions."""
    tf.saved_model.save(module, directory, signatures={SIGNATURE_KEY: module.serve.get_concrete_function()})


def _tflite_bytes(module: tf.Module) -> bytes:
    """Convert with TFLite's builtin ops only, so the plain LiteRT interpreter runs the result."""
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.act.get_concrete_function()], module)
    return converter.convert()


def _frozen(concrete: tf.types.experimental.ConcreteFunction) -> tf.types.experimental.ConcreteFunction:
    """Inline captured variables and tensors as constants, leaving the observations the only input.

    tf2onnx's from_function would otherwise make each captured tensor (a tf.constant the policy closes
    over) a required ONNX input.
    """
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return convert_variables_to_constants_v2(concrete)


def _onnx_bytes(concrete: tf.types.experimental.ConcreteFunction) -> bytes:
    """Convert the frozen graph with tf2onnx, naming its inputs ``observations`` (and ``action_mask``) and its
    output ``actions``."""
    tf2onnx = require('tf2onnx', 'exporting to onnx')
    with _quiet_tensorflow():  # tf2onnx's TF1 helpers announce their deprecation on every call
        return _converted(tf2onnx, _frozen(concrete))


@contextlib.contextmanager
def _quiet_tensorflow():
    """Silence TensorFlow's warnings and tf2onnx's progress notes for a while."""
    loggers = [tf.get_logger(), logging.getLogger('tf2onnx')]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for each, level in zip(loggers, levels):
            each.setLevel(level)


def _converted(tf2onnx: ModuleType, frozen: tf.types.experimental.ConcreteFunction) -> bytes:
    """The ONNX bytes of a frozen graph."""
    sources, targets = [tensor.name for tensor in frozen.inputs], [tensor.name for tensor in frozen.outputs]
    names = [tensor.name.split(':')[0] for tensor in frozen.inputs]  # the signature's names
    model, _ = tf2onnx.convert.from_graph_def(
        frozen.graph.as_graph_def(),
        name='policy',
        input_names=sources,
        output_names=targets,
        opset=ONNX_OPSET,
        tensors_to_rename={**dict(zip(sources, names)), **dict(zip(targets, (OUTPUT_NAME, NEXT_STATE_NAME)))},
    )
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = 'batch'  # tf2onnx leaves it as unk__N
    return model.SerializeToString()



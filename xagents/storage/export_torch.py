"""The PyTorch side of :mod:`xagents.storage.export`: ONNX written in the process by PyTorch's own exporter, as Keras'
``Model.export(format='onnx')`` does on this backend (its TorchScript tracer, which keeps a dynamic batch), with no
TensorFlow. SavedModel and TFLite stay TensorFlow's."""
from __future__ import annotations

import io
import warnings
from typing import Callable, Sequence

import numpy as np
import torch

from xagents.storage.export_parts import (NEXT_STATE_NAME, ONNX_OPSET, OUTPUT_NAME, STATE_NAME, Spec, call_policy,
                                          require)

TRACE_BATCH = 2  # the sample batch the tracer runs: not 1, which broadcasting could fold into the graph


class _Policy(torch.nn.Module):
    """The policy as a module of its export's inputs, in order; ``modules`` (the Keras models it reads, each a
    ``torch.nn.Module`` on this backend) become submodules, so their weights are the export's parameters."""

    def __init__(self, policy: Callable, names: list[str], modules: Sequence[torch.nn.Module]):
        super().__init__()
        self.policy, self.names = policy, names
        self.owned = torch.nn.ModuleList(modules)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        actions, next_state = call_policy(self.policy, self.names, inputs)
        actions = actions.to(torch.float32 if torch.is_floating_point(actions) else torch.int64)
        return actions if next_state is None else (actions, next_state.to(torch.float32))


def _sample(shape: tuple[int | None, ...], dtype: str) -> torch.Tensor:
    """Inputs to trace on: zeros (True for booleans: every action allowed, every episode starting)."""
    shape = tuple(TRACE_BATCH if size is None else size for size in shape)
    return torch.from_numpy(np.ones(shape, bool) if dtype == 'bool' else np.zeros(shape, dtype))


def _ravel(graph, values):
    """``aten::ravel`` (Keras' ``ops.take`` flattens its indices with it), which PyTorch's exporter lacks, as an ONNX
    Reshape to one dimension."""
    return graph.op('Reshape', values, graph.op('Constant', value_t=torch.tensor([-1], dtype=torch.int64)))


def onnx_bytes(policy: Callable, specs: dict[str, Spec], modules: Sequence[torch.nn.Module]) -> bytes:
    """The ONNX bytes of ``policy`` on inputs ``specs``, each with its batch dimension named ``batch``."""
    onnx = require('onnx', 'exporting to onnx')  # PyTorch's exporter needs it too, and says so in 15 lines
    torch.onnx.register_custom_op_symbolic('aten::ravel', _ravel, ONNX_OPSET)
    names = list(specs)
    outputs = [OUTPUT_NAME, *([NEXT_STATE_NAME] if STATE_NAME in specs else [])]
    dynamic = {name: {0: 'batch'} for name in [*names, *outputs]}
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer's notes on Keras' shape checks (Python values of tensors that are constant for any batch) and
        # PyTorch's note that this is its TorchScript-based exporter, which Keras uses too for a dynamic batch.
        warnings.simplefilter('ignore', torch.jit.TracerWarning)
        warnings.simplefilter('ignore', DeprecationWarning)
        torch.onnx.export(_Policy(policy, names, modules), tuple(_sample(*spec) for spec in specs.values()),
                          buffer, input_names=names, output_names=outputs, dynamic_axes=dynamic,
                          opset_version=ONNX_OPSET, dynamo=False)
    content = buffer.getvalue()
    kept = [value.name for value in onnx.load_from_string(content).graph.input]
    if kept != names:  # an input the trace folded into a constant (NumPy computing on a tensor): never a policy
        raise RuntimeError(f'the ONNX export lost its inputs {", ".join(sorted(set(names) - set(kept)))}: the '
                           "policy's graph computed on them outside PyTorch, please report this")
    return content

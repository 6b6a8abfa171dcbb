"""Tracing a network to ONNX with the role's input and output names: one writer for every
exported graph."""

from __future__ import annotations

import io
import warnings

import torch
from torch import nn

from blender_addon.core import models as core_models

OPSET = 17


def onnx_bytes(net: nn.Module, example: tuple[torch.Tensor, ...], role: str) -> bytes:
    """The traced graph; every input and output whose role shape starts with the batch axis
    ``B`` gets a dynamic batch."""
    inputs = core_models.ROLE_INPUTS[role]
    outputs = core_models.ROLE_OUTPUTS[role]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation note
        torch.onnx.export(net, example, buf, input_names=[n for n, _ in inputs],
                          output_names=[n for n, _ in outputs],
                          dynamic_axes={n: {0: "batch"} for n, shape in [*inputs, *outputs]
                                        if shape[:1] == ("B",)},
                          opset_version=OPSET, dynamo=False)
    return buf.getvalue()

"""A model file's nodes and weights, read from its ONNX protobuf without the ``onnx`` package.

The compiled networks (:mod:`.compiled_networks`) need their weights and the order of
their layers; onnxruntime does not hand them out, and the add-on ships without the ``onnx``
package (nor protobuf). An ONNX file is a protobuf message; this reads the few fields that
name the graph's nodes, inputs, outputs and float initializers from its wire format, and
nothing it reads is ever executed. Anything else (tensors stored outside the file, weights
of other types) is left out, so a caller that needs it finds it missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Field numbers (onnx.proto3).
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 1, 5, 11, 12
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP_TYPE, _NODE_ATTRIBUTE = 1, 2, 4, 5
_ATTR_NAME, _ATTR_FLOAT, _ATTR_INT = 1, 2, 3
_VALUE_INFO_NAME = 1
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_FLOAT_DATA, _TENSOR_NAME, _TENSOR_RAW = 1, 2, 4, 8, 9
_FLOAT = 1  # TensorProto.FLOAT
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class OnnxReadError(ValueError):
    """The file is not an ONNX model this reader can read."""


@dataclass
class Node:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, float | int] = field(default_factory=dict)  # numbers only


@dataclass
class Graph:
    nodes: list[Node]
    initializers: dict[str, np.ndarray]  # float32 weights, by name
    inputs: list[str]
    outputs: list[str]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise OnnxReadError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise OnnxReadError("varint too long")


def _fields(buf: memoryview) -> list[tuple[int, int, int | memoryview]]:
    """A message's (field number, wire type, value) in order: ints for varints and fixed
    fields (their raw bits), byte views for length-delimited ones."""
    out: list[tuple[int, int, int | memoryview]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _BYTES:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise OnnxReadError(f"field {number} runs past the end of its message")
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (_FIXED64, _FIXED32):
            width = 8 if wire == _FIXED64 else 4
            if pos + width > len(buf):
                raise OnnxReadError(f"field {number} runs past the end of its message")
            value, pos = int.from_bytes(buf[pos:pos + width], "little"), pos + width
        else:
            raise OnnxReadError(f"field {number} has wire type {wire}, not a protobuf one")
        out.append((number, wire, value))
    return out


def _text(value: int | memoryview) -> str:
    if not isinstance(value, memoryview):
        raise OnnxReadError("a string field holds a number")
    return bytes(value).decode("utf-8")


def _node(buf: memoryview) -> Node:
    node = Node("", [], [])
    for number, _, value in _fields(buf):
        if number == _NODE_INPUT:
            node.inputs.append(_text(value))
        elif number == _NODE_OUTPUT:
            node.outputs.append(_text(value))
        elif number == _NODE_OP_TYPE:
            node.op_type = _text(value)
        elif number == _NODE_ATTRIBUTE and isinstance(value, memoryview):
            name, number_value = None, None
            for a_number, a_wire, a_value in _fields(value):
                if a_number == _ATTR_NAME:
                    name = _text(a_value)
                elif a_number == _ATTR_FLOAT and a_wire == _FIXED32:
                    number_value = float(np.frombuffer(int(a_value).to_bytes(4, "little"),
                                                       dtype="<f4")[0])
                elif a_number == _ATTR_INT and a_wire == _VARINT:
                    number_value = int(a_value) - (1 << 64) * (int(a_value) >> 63)
            if name is not None and number_value is not None:
                node.attributes[name] = number_value
    return node


def _tensor(buf: memoryview) -> tuple[str, np.ndarray | None]:
    """A float tensor's name and values (None for other types or outside data)."""
    name, dims, dtype, raw, floats = "", [], None, None, []
    for number, wire, value in _fields(buf):
        if number == _TENSOR_NAME:
            name = _text(value)
        elif number == _TENSOR_DIMS:
            if wire == _BYTES:  # packed
                pos, packed = 0, value
                while pos < len(packed):
                    dim, pos = _varint(packed, pos)
                    dims.append(dim)
            else:
                dims.append(int(value))
        elif number == _TENSOR_DATA_TYPE:
            dtype = value
        elif number == _TENSOR_RAW:
            raw = bytes(value)
        elif number == _TENSOR_FLOAT_DATA:
            floats.append(np.frombuffer(bytes(value), dtype="<f4") if wire == _BYTES
                          else np.frombuffer(int(value).to_bytes(4, "little"), dtype="<f4"))
    if dtype != _FLOAT:
        return name, None
    data = np.frombuffer(raw, dtype="<f4") if raw is not None \
        else np.concatenate(floats) if floats else np.zeros(0, dtype="<f4")
    if data.size != int(np.prod(dims, dtype=np.int64)):
        return name, None  # stored outside the file
    return name, data.astype(np.float32).reshape(dims)


def read_graph(path: str | Path) -> Graph:
    """The main graph of the ONNX file at ``path``: its nodes in order, float initializers,
    input and output names. Raises :class:`OnnxReadError` naming the file where it is not
    an ONNX model."""
    path = Path(path)
    try:
        model = _fields(memoryview(path.read_bytes()))
        graphs = [v for n, w, v in model if n == _MODEL_GRAPH and isinstance(v, memoryview)]
        if not graphs:
            raise OnnxReadError("no graph in the file")
        graph = Graph([], {}, [], [])
        for number, _, value in _fields(graphs[-1]):
            if not isinstance(value, memoryview):
                continue
            if number == _GRAPH_NODE:
                graph.nodes.append(_node(value))
            elif number == _GRAPH_INITIALIZER:
                name, data = _tensor(value)
                if data is not None:
                    graph.initializers[name] = data
            elif number in (_GRAPH_INPUT, _GRAPH_OUTPUT):
                names = [_text(v) for n, _, v in _fields(value) if n == _VALUE_INFO_NAME]
                (graph.inputs if number == _GRAPH_INPUT else graph.outputs).extend(names)
        return graph
    except (OnnxReadError, UnicodeDecodeError) as exc:
        raise OnnxReadError(f"{path}: not an ONNX model this reader can read ({exc})") from exc

"""Keep an int8 model's weights int8 in memory: ``Cast → Mul → MatMul`` becomes one
``DynamicQuantizeMatMul``.

The shipped MiniLM stores its weight matrices as int8 with a float scale per column, and
dequantises them in the graph (``Cast(W) * scale``, then ``MatMul``). onnxruntime's graph
optimiser folds those constants, so the session holds every weight as float32 (~90 MB,
~170 MB of RSS for a 23 MB file). Rewritten as onnxruntime's ``DynamicQuantizeMatMul``
(``com.microsoft``), the weights stay int8 and the activations are quantised per call: the
session takes about half the memory and a query about half the time, with embeddings within
~1 % (cosine) of the original::

    rewritten = int8_matmuls(model_bytes)   # None: nothing to rewrite
    session = ort.InferenceSession(rewritten or model_bytes, ...)

Only exact matches are rewritten (an int8 2-D initializer cast to float, multiplied by a
float initializer of shape ``[N]`` or ``[1, N]``, used by nothing else, as a MatMul's second
input); anything else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from pml.discovery.proto_wire import (
    LENGTH,
    Field,
    int_field,
    message_field,
    read_message,
    read_varint,
    string_field,
    write_message,
)

# ONNX field numbers (onnx.proto).
_MODEL_GRAPH: Final = 7
_MODEL_OPSET: Final = 8
_GRAPH_NODE: Final = 1
_GRAPH_INITIALIZER: Final = 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 4, 5, 7
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME = 1, 2, 8
_ATTRIBUTE_NAME, _ATTRIBUTE_INT = 1, 3
_FLOAT, _INT8 = 1, 3
_CONTRIB: Final = "com.microsoft"
FUSED_OP: Final = "DynamicQuantizeMatMul"
_PER_COLUMN: Final = "/per_column"


@dataclass(slots=True)
class _Node:
    fields: list[Field]
    inputs: list[str] = field(default_factory=list[str])
    outputs: list[str] = field(default_factory=list[str])
    op: str = ""
    domain: str = ""

    @classmethod
    def read(cls, payload: bytes) -> _Node:
        node = cls(read_message(payload))
        for item in node.fields:
            if item.number == _NODE_INPUT:
                node.inputs.append(item.text())
            elif item.number == _NODE_OUTPUT:
                node.outputs.append(item.text())
            elif item.number == _NODE_OP:
                node.op = item.text()
            elif item.number == _NODE_DOMAIN:
                node.domain = item.text()
        return node

    def cast_to(self) -> int | None:
        """A Cast node's ``to`` attribute."""
        for item in self.fields:
            if item.number != _NODE_ATTRIBUTE:
                continue
            attribute = read_message(item.payload)
            names = [a.text() for a in attribute if a.number == _ATTRIBUTE_NAME]
            values = [a.integer() for a in attribute if a.number == _ATTRIBUTE_INT]
            if names == ["to"] and len(values) == 1:
                return values[0]
        return None


@dataclass(frozen=True, slots=True)
class _Tensor:
    fields: list[Field]
    name: str
    data_type: int
    dims: tuple[int, ...]

    @classmethod
    def read(cls, payload: bytes) -> _Tensor:
        fields = read_message(payload)
        name, data_type, dims = "", 0, list[int]()
        for item in fields:
            if item.number == _TENSOR_NAME:
                name = item.text()
            elif item.number == _TENSOR_TYPE:
                data_type = item.integer()
            elif item.number == _TENSOR_DIMS:
                dims.extend(_ints(item))
        return cls(fields, name, data_type, tuple(dims))

    def per_column(self, name: str, columns: int) -> Field:
        """This scale tensor as a 1-D ``[columns]`` tensor called ``name``."""
        kept = [f for f in self.fields if f.number not in (_TENSOR_DIMS, _TENSOR_NAME)]
        return message_field(
            _GRAPH_INITIALIZER,
            [int_field(_TENSOR_DIMS, columns), *kept, string_field(_TENSOR_NAME, name)],
        )


def _ints(item: Field) -> list[int]:
    if item.wire != LENGTH:  # one unpacked value
        return [item.integer()]
    values: list[int] = []
    at = 0
    while at < len(item.payload):
        value, at = read_varint(item.payload, at)
        values.append(value)
    return values


def int8_matmuls(model: bytes) -> bytes | None:
    """The model with its dequantised int8 MatMuls fused (see the module docstring), or
    ``None`` when it has none. Raises ``ValueError`` for bytes that are not a model."""
    model_fields = read_message(model)
    graphs = [f for f in model_fields if f.number == _MODEL_GRAPH]
    if len(graphs) != 1:
        raise ValueError("not an ONNX model: expected one graph")
    graph_fields = read_message(graphs[0].payload)
    nodes = {
        i: _Node.read(f.payload) for i, f in enumerate(graph_fields) if f.number == _GRAPH_NODE
    }
    tensors = {
        t.name: t
        for t in (_Tensor.read(f.payload) for f in graph_fields if f.number == _GRAPH_INITIALIZER)
    }
    rewritten, dropped, scales = _fuse(nodes, tensors)
    if not rewritten:
        return None
    still_used = {
        name
        for index, node in nodes.items()
        if index not in dropped
        for name in rewritten.get(index, node).inputs
    }
    replaced = {name.removesuffix(_PER_COLUMN) for name in scales}
    stale = {
        index
        for index, item in enumerate(graph_fields)
        if item.number == _GRAPH_INITIALIZER
        and (name := _Tensor.read(item.payload).name) in replaced
        and name not in still_used
    }
    graph_out: list[Field] = []
    for index, item in enumerate(graph_fields):
        if index in dropped or index in stale:
            continue
        node = rewritten.get(index)
        graph_out.append(message_field(_GRAPH_NODE, node.fields) if node else item)
    graph_out.extend(scales.values())
    out: list[Field] = []
    for item in model_fields:
        out.append(message_field(_MODEL_GRAPH, graph_out) if item.number == _MODEL_GRAPH else item)
    if not any(_opset_domain(f) == _CONTRIB for f in model_fields if f.number == _MODEL_OPSET):
        out.append(message_field(_MODEL_OPSET, [string_field(1, _CONTRIB), int_field(2, 1)]))
    return write_message(out)


def _opset_domain(item: Field) -> str:
    return next((f.text() for f in read_message(item.payload) if f.number == 1), "")


def _fuse(
    nodes: dict[int, _Node], tensors: dict[str, _Tensor]
) -> tuple[dict[int, _Node], set[int], dict[str, Field]]:
    """The MatMul nodes rewritten (by field index), the Cast/Mul nodes to drop, and the
    per-column scale tensors to add (by name)."""
    producer = {out: index for index, node in nodes.items() for out in node.outputs}
    uses: dict[str, int] = {}
    for node in nodes.values():
        for name in node.inputs:
            uses[name] = uses.get(name, 0) + 1
    rewritten: dict[int, _Node] = {}
    dropped: set[int] = set()
    scales: dict[str, Field] = {}
    for index, node in nodes.items():
        if node.op != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        mul_at = producer.get(node.inputs[1])
        found = _dequantised(mul_at, nodes, producer, tensors, uses)
        if mul_at is None or found is None:
            continue
        cast_at, weight, scale = found
        columns = weight.dims[1]
        scale_name = f"{scale.name}{_PER_COLUMN}"
        scales.setdefault(scale_name, scale.per_column(scale_name, columns))
        kept = [f for f in node.fields if f.number not in (_NODE_INPUT, _NODE_OP, _NODE_DOMAIN)]
        inputs = [string_field(_NODE_INPUT, n) for n in (node.inputs[0], weight.name, scale_name)]
        fields = [
            *inputs,
            *kept,
            string_field(_NODE_OP, FUSED_OP),
            string_field(_NODE_DOMAIN, _CONTRIB),
        ]
        rewritten[index] = _Node(fields, inputs=[node.inputs[0], weight.name, scale_name])
        dropped.update((mul_at, cast_at))
    return rewritten, dropped, scales


def _dequantised(
    mul_at: int | None,
    nodes: dict[int, _Node],
    producer: dict[str, int],
    tensors: dict[str, _Tensor],
    uses: dict[str, int],
) -> tuple[int, _Tensor, _Tensor] | None:
    """``(cast index, int8 weight, float scale)`` when node ``mul_at`` is ``Cast(W) * S``."""
    if mul_at is None:
        return None
    mul = nodes[mul_at]
    if mul.op != "Mul" or len(mul.inputs) != 2 or len(mul.outputs) != 1:
        return None
    if uses.get(mul.outputs[0], 0) != 1:
        return None
    for side in (0, 1):
        cast_at = producer.get(mul.inputs[side])
        scale = tensors.get(mul.inputs[1 - side])
        if cast_at is None or scale is None:
            continue
        cast = nodes[cast_at]
        is_cast = cast.op == "Cast" and len(cast.inputs) == 1 and len(cast.outputs) == 1
        weight = tensors.get(cast.inputs[0]) if is_cast else None
        if (
            weight is None
            or uses.get(cast.outputs[0], 0) != 1
            or cast.cast_to() != _FLOAT
            or weight.data_type != _INT8
            or len(weight.dims) != 2
            or scale.data_type != _FLOAT
            or scale.dims not in ((weight.dims[1],), (1, weight.dims[1]))
        ):
            continue
        return cast_at, weight, scale
    return None

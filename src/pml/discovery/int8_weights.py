"""Keep an int8 model's weights int8 in memory.

The shipped MiniLM stores its weights as int8 with float scales and dequantises them in the
graph: ``Cast(W) * scale`` feeds a ``MatMul`` (a scale per column) or a ``Gather`` (the
embedding tables, a scale per row). onnxruntime's optimiser folds those constants, so the
session holds every weight as float32 (~170 MB of RSS for a 23 MB file). Rewritten, the
weights stay int8:

- ``MatMul(X, Cast(W) * S)`` → ``DynamicQuantizeMatMul(X, W, S)`` (``com.microsoft``: X is
  quantised per call, the product runs in int8);
- ``Gather(Cast(E) * S, ids)`` → ``Cast(Gather(E, ids)) * Gather(S, ids)`` (only the rows
  asked for are dequantised).

The session then takes ~35 MB and a query about half the time; vectors stay within ~1 %
(cosine) of the original graph's::

    rewritten = int8_weights(model_bytes)   # None: nothing to rewrite
    session = ort.InferenceSession(rewritten or model_bytes, ...)

Only exact matches are rewritten (an int8 2-D initializer cast to float and multiplied by a
float initializer of the right shape, each used once); anything else is left as it is.
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
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME = 1, 2, 8
_ATTRIBUTE_NAME, _ATTRIBUTE_INT, _ATTRIBUTE_TYPE = 1, 3, 20
_ATTRIBUTE_TYPE_INT: Final = 2
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

    def standard(self, op: str, inputs: int) -> bool:
        """Whether this is the standard ``op`` with ``inputs`` inputs and one output."""
        return (
            self.op == op
            and self.domain in ("", "ai.onnx")
            and len(self.inputs) == inputs
            and len(self.outputs) == 1
        )

    def int_attribute(self, name: str) -> int | None:
        """The value of an int attribute (``None`` when absent)."""
        for item in self.fields:
            if item.number != _NODE_ATTRIBUTE:
                continue
            attribute = read_message(item.payload)
            names = [a.text() for a in attribute if a.number == _ATTRIBUTE_NAME]
            values = [a.integer() for a in attribute if a.number == _ATTRIBUTE_INT]
            if names == [name] and len(values) == 1:
                return values[0]
        return None

    def attributes(self) -> list[Field]:
        return [f for f in self.fields if f.number == _NODE_ATTRIBUTE]


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

    def reshaped(self, name: str, dims: tuple[int, ...]) -> Field:
        """This tensor with other ``dims`` (same data), called ``name``."""
        kept = [f for f in self.fields if f.number not in (_TENSOR_DIMS, _TENSOR_NAME)]
        dims_fields = [int_field(_TENSOR_DIMS, d) for d in dims]
        return message_field(
            _GRAPH_INITIALIZER, [*dims_fields, *kept, string_field(_TENSOR_NAME, name)]
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


def _node(op: str, inputs: list[str], output: str, *extra: Field) -> Field:
    fields = [string_field(_NODE_INPUT, name) for name in inputs]
    fields += [string_field(_NODE_OUTPUT, output), string_field(_NODE_NAME, output)]
    return message_field(_GRAPH_NODE, [*fields, string_field(_NODE_OP, op), *extra])


def _cast_to_float() -> Field:
    return message_field(
        _NODE_ATTRIBUTE,
        [
            string_field(_ATTRIBUTE_NAME, "to"),
            int_field(_ATTRIBUTE_TYPE, _ATTRIBUTE_TYPE_INT),
            int_field(_ATTRIBUTE_INT, _FLOAT),
        ],
    )


@dataclass(slots=True)
class _Rewrite:
    """What to change in the graph: nodes replaced (by field index, by a list of nodes),
    initializers to add, and the scale initializers the old nodes used."""

    replaced: dict[int, list[Field]] = field(default_factory=dict[int, list[Field]])
    added: dict[str, Field] = field(default_factory=dict[str, Field])
    old_scales: set[str] = field(default_factory=set[str])
    fused: int = 0


def int8_weights(model: bytes) -> bytes | None:
    """The model with its int8 weights kept int8 (see the module docstring), or ``None``
    when there is nothing to rewrite. Raises ``ValueError`` for bytes that are not a model."""
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
    rewrite = _plan(nodes, tensors)
    if not rewrite.replaced:
        return None
    still_used = {
        name
        for index, node in nodes.items()
        if index not in rewrite.replaced
        for name in node.inputs
    }
    still_used |= {
        name
        for fields in rewrite.replaced.values()
        for item in fields
        for name in _Node.read(item.payload).inputs
    }
    graph_out: list[Field] = []
    for index, item in enumerate(graph_fields):
        if index in rewrite.replaced:
            graph_out.extend(rewrite.replaced[index])
        elif item.number != _GRAPH_INITIALIZER or _is_kept(item, rewrite.old_scales, still_used):
            graph_out.append(item)
    graph_out.extend(rewrite.added.values())
    out = [
        message_field(_MODEL_GRAPH, graph_out) if item.number == _MODEL_GRAPH else item
        for item in model_fields
    ]
    has_contrib = any(
        _opset_domain(f) == _CONTRIB for f in model_fields if f.number == _MODEL_OPSET
    )
    if rewrite.fused and not has_contrib:
        out.append(message_field(_MODEL_OPSET, [string_field(1, _CONTRIB), int_field(2, 1)]))
    return write_message(out)


def _is_kept(item: Field, old_scales: set[str], still_used: set[str]) -> bool:
    name = _Tensor.read(item.payload).name
    return name not in old_scales or name in still_used


def _opset_domain(item: Field) -> str:
    return next((f.text() for f in read_message(item.payload) if f.number == 1), "")


def _plan(nodes: dict[int, _Node], tensors: dict[str, _Tensor]) -> _Rewrite:
    producer = {out: index for index, node in nodes.items() for out in node.outputs}
    uses: dict[str, int] = {}
    for node in nodes.values():
        for name in node.inputs:
            uses[name] = uses.get(name, 0) + 1
    rewrite = _Rewrite()
    for index, node in nodes.items():
        if node.standard("MatMul", 2):
            found = _dequantised(node.inputs[1], nodes, producer, tensors, uses, per="column")
            if found is not None:
                _fuse_matmul(rewrite, index, node, found)
        elif node.standard("Gather", 2) and not node.int_attribute("axis"):
            found = _dequantised(node.inputs[0], nodes, producer, tensors, uses, per="row")
            if found is not None:
                _split_gather(rewrite, index, node, found)
    return rewrite


def _fuse_matmul(
    rewrite: _Rewrite, index: int, node: _Node, found: tuple[int, int, _Tensor, _Tensor]
) -> None:
    mul_at, cast_at, weight, scale = found
    scale_name = f"{scale.name}{_PER_COLUMN}"
    rewrite.added.setdefault(scale_name, scale.reshaped(scale_name, (weight.dims[1],)))
    kept = [f for f in node.fields if f.number in (_NODE_OUTPUT, _NODE_NAME)]
    inputs = [string_field(_NODE_INPUT, n) for n in (node.inputs[0], weight.name, scale_name)]
    fused = [*inputs, *kept, string_field(_NODE_OP, FUSED_OP), string_field(_NODE_DOMAIN, _CONTRIB)]
    rewrite.replaced[index] = [message_field(_GRAPH_NODE, fused)]
    rewrite.replaced[mul_at] = rewrite.replaced[cast_at] = []
    rewrite.old_scales.add(scale.name)
    rewrite.fused += 1


def _split_gather(
    rewrite: _Rewrite, index: int, node: _Node, found: tuple[int, int, _Tensor, _Tensor]
) -> None:
    mul_at, cast_at, table, scale = found
    ids, out = node.inputs[1], node.outputs[0]
    rows, row_scales = f"{out}/int8_rows", f"{out}/row_scales"
    rewrite.replaced[index] = [
        _node("Gather", [table.name, ids], rows, *node.attributes()),
        _node("Cast", [rows], f"{out}/rows", _cast_to_float()),
        _node("Gather", [scale.name, ids], row_scales, *node.attributes()),
        _node("Mul", [f"{out}/rows", row_scales], out),
    ]
    rewrite.replaced[mul_at] = rewrite.replaced[cast_at] = []


def _dequantised(
    name: str,
    nodes: dict[int, _Node],
    producer: dict[str, int],
    tensors: dict[str, _Tensor],
    uses: dict[str, int],
    *,
    per: str,
) -> tuple[int, int, _Tensor, _Tensor] | None:
    """``(mul index, cast index, int8 weight, float scale)`` when ``name`` is made by
    ``Cast(W) * S`` with a scale per column (``[N]``/``[1, N]``) or per row (``[M, 1]``)."""
    mul_at = producer.get(name)
    if mul_at is None or uses.get(name, 0) != 1 or not nodes[mul_at].standard("Mul", 2):
        return None
    mul = nodes[mul_at]
    for side in (0, 1):
        cast_at = producer.get(mul.inputs[side])
        scale = tensors.get(mul.inputs[1 - side])
        if cast_at is None or scale is None or not nodes[cast_at].standard("Cast", 1):
            continue
        cast = nodes[cast_at]
        weight = tensors.get(cast.inputs[0])
        if (
            weight is None
            or uses.get(cast.outputs[0], 0) != 1
            or cast.int_attribute("to") != _FLOAT
            or weight.data_type != _INT8
            or len(weight.dims) != 2
            or scale.data_type != _FLOAT
        ):
            continue
        rows, columns = weight.dims
        shapes = ((columns,), (1, columns)) if per == "column" else ((rows, 1),)
        if scale.dims in shapes:
            return mul_at, cast_at, weight, scale
    return None

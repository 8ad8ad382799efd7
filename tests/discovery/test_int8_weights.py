"""The int8 MatMul fusion: exact rewrites only, same answers, and the shipped model's vectors
within 2 % (cosine) of the unfused graph's; the wire format reader refuses garbage."""

from __future__ import annotations

import importlib
import logging
import random
import struct
from typing import Any

import numpy as np
import pytest

from pml.discovery import minilm
from pml.discovery.int8_weights import FUSED_OP, int8_weights
from pml.discovery.proto_wire import (
    LENGTH,
    Field,
    int_field,
    message_field,
    read_message,
    read_varint,
    string_field,
    varint,
    write_message,
)
from pml.freed_memory import release_freed_memory

ort: Any = importlib.import_module("onnxruntime")

TEXTS = [
    "what time is it in Tokyo",
    "read a JSON file from the project folder",
    "list the files of a directory",
    "store a fact about the user in memory",
    "fetch a web page and return it as markdown",
    "",
    "ünïcödé and emoji 🚀 in a query",
]


def _tensor(name: str, data_type: int, dims: list[int], raw: bytes) -> list[Field]:
    dims_fields = [int_field(1, d) for d in dims]
    return [*dims_fields, int_field(2, data_type), string_field(8, name), Field(9, LENGTH, raw)]


def _value_info(name: str, dims: list[int]) -> bytes:
    shape = [message_field(1, [int_field(1, d)]) for d in dims]
    tensor_type = [int_field(1, 1), message_field(2, shape)]
    return write_message([string_field(1, name), message_field(2, [message_field(1, tensor_type)])])


def _node(op: str, inputs: list[str], outputs: list[str], *extra: Field) -> Field:
    fields = [*(string_field(1, i) for i in inputs), *(string_field(2, o) for o in outputs)]
    return message_field(1, [*fields, string_field(4, op), *extra])


def tiny_model(*, scale_dims: list[int], second_use: bool = False, cast_to: int = 1) -> bytes:
    """X[2,4] @ (Cast(W int8 [4,3]) * S) -> Y[2,3] (and, with ``second_use``, Z = the
    dequantised weight itself as a second output)."""
    rng = np.random.default_rng(7)
    weights = rng.integers(-127, 127, size=(4, 3), dtype=np.int8)
    scale = (rng.random(3, dtype=np.float32) * 0.05 + 0.01).astype(np.float32)
    cast = message_field(
        1,
        [
            string_field(1, "W"),
            string_field(2, "Wf"),
            string_field(4, "Cast"),
            message_field(5, [string_field(1, "to"), int_field(20, 2), int_field(3, cast_to)]),
        ],
    )
    nodes = [
        cast,
        _node("Mul", ["Wf", "S"], ["Wd"]),
        _node("MatMul", ["X", "Wd"], ["Y"]),
    ]
    outputs = [_value_info("Y", [2, 3])]
    if second_use:
        nodes.append(_node("Identity", ["Wd"], ["Z"]))
        outputs.append(_value_info("Z", [4, 3]))
    graph = [
        *nodes,
        string_field(2, "tiny"),
        message_field(5, _tensor("W", 3, [4, 3], weights.tobytes())),
        message_field(5, _tensor("S", 1, scale_dims, scale.tobytes())),
        Field(11, LENGTH, _value_info("X", [2, 4])),
        *(Field(12, LENGTH, o) for o in outputs),
    ]
    model = [
        int_field(1, 8),
        message_field(8, [string_field(1, ""), int_field(2, 17)]),
        message_field(7, graph),
    ]
    return write_message(model)


def tiny_table(*, scale_dims: list[int]) -> bytes:
    """Y = Gather(Cast(E int8 [5,3]) * S, ids): an embedding table with a scale per row."""
    rng = np.random.default_rng(5)
    table = rng.integers(-127, 127, size=(5, 3), dtype=np.int8)
    scale = (rng.random(scale_dims, dtype=np.float32) * 0.05 + 0.01).astype(np.float32)
    to_float = message_field(5, [string_field(1, "to"), int_field(20, 2), int_field(3, 1)])
    ids_info = write_message(
        [
            string_field(1, "ids"),
            message_field(2, [message_field(1, [int_field(1, 7), message_field(2, [])])]),
        ]
    )
    graph = [
        _node("Cast", ["E"], ["Ef"], to_float),
        _node("Mul", ["Ef", "S"], ["Ed"]),
        _node("Gather", ["Ed", "ids"], ["Y"]),
        message_field(5, _tensor("E", 3, [5, 3], table.tobytes())),
        message_field(5, _tensor("S", 1, scale_dims, scale.tobytes())),
        Field(11, LENGTH, ids_info),
        Field(12, LENGTH, _value_info("Y", [4, 3])),
    ]
    model = [
        int_field(1, 8),
        message_field(8, [string_field(1, ""), int_field(2, 17)]),
        message_field(7, graph),
    ]
    return write_message(model)


def run(model: bytes, x: np.ndarray[Any, Any], name: str = "X") -> list[Any]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {name: x})


def test_an_embedding_table_is_gathered_before_it_is_dequantised() -> None:
    model = tiny_table(scale_dims=[5, 1])
    split = int8_weights(model)
    assert split is not None
    assert ops(split) == ["Gather", "Cast", "Gather", "Mul"]
    ids = np.array([4, 0, 2, 2], dtype=np.int64)
    (expected,) = run(model, ids, "ids")
    (got,) = run(split, ids, "ids")
    np.testing.assert_array_equal(got, expected)


def test_a_table_scaled_per_column_is_left_alone() -> None:
    assert int8_weights(tiny_table(scale_dims=[1, 3])) is None


def ops(model: bytes) -> list[str]:
    graph = next(f for f in read_message(model) if f.number == 7)
    nodes = [read_message(f.payload) for f in read_message(graph.payload) if f.number == 1]
    return [next(f.text() for f in node if f.number == 4) for node in nodes]


@pytest.mark.parametrize("scale_dims", [[1, 3], [3]])
def test_tiny_model_is_fused_and_answers_the_same(scale_dims: list[int]) -> None:
    model = tiny_model(scale_dims=scale_dims)
    fused = int8_weights(model)
    assert fused is not None
    assert ops(fused) == [FUSED_OP]
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    (expected,) = run(model, x)
    (got,) = run(fused, x)
    assert np.allclose(got, expected, rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    "model",
    [
        tiny_model(scale_dims=[1, 3], second_use=True),  # the dequantised weight is used twice
        tiny_model(scale_dims=[2, 3]),  # not a per-column scale
        tiny_model(scale_dims=[1, 4]),  # wrong number of columns
        tiny_model(scale_dims=[1, 3], cast_to=10),  # cast to float16
    ],
)
def test_anything_but_an_exact_match_is_left_alone(model: bytes) -> None:
    assert int8_weights(model) is None


def test_the_shipped_model_is_fused_and_embeds_within_two_percent() -> None:
    model_bytes, tokenizer_bytes = minilm.checked_model()
    fused = int8_weights(model_bytes)
    assert fused is not None
    assert ops(fused).count(FUSED_OP) == 36
    # no whole table is dequantised any more: every Cast takes gathered rows
    assert ops(fused).count("Gather") == ops(model_bytes).count("Gather") + 2
    assert ops(fused).count("Cast") == ops(model_bytes).count("Cast") - 36
    embedder = minilm.minilm_from(model_bytes, tokenizer_bytes)
    plain = minilm.MiniLmEmbedder(
        ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]),
        embedder._tokenizer,  # pyright: ignore[reportPrivateUsage]
    )
    got, expected = embedder.embed(TEXTS), plain.embed(TEXTS)
    for row, text in enumerate(TEXTS):
        if not text:
            assert not got[row].any()
            continue
        assert float(got[row] @ expected[row]) > 0.98, text
    # the neighbour structure holds: each text is closest to itself across the two graphs
    assert list(np.argmax(got[:5] @ expected[:5].T, axis=1)) == list(range(5))


def test_a_failed_fusion_falls_back_to_the_shipped_graph(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(model: bytes) -> bytes:
        raise ValueError("truncated field")

    monkeypatch.setattr(minilm, "int8_weights", broken)
    with caplog.at_level(logging.WARNING, logger="pml.discovery.minilm"):
        embedder = minilm.minilm_from(*minilm.checked_model())
    assert "fusing failed: truncated field" in caplog.text
    vector = embedder.embed(["what time is it"])
    assert abs(float(np.linalg.norm(vector[0])) - 1.0) < 1e-5
    release_freed_memory()  # callable whatever the libc


def test_wire_format_round_trips_the_shipped_model() -> None:
    model_bytes, _ = minilm.checked_model()
    assert write_message(read_message(model_bytes)) == model_bytes


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63)])
def test_varints_round_trip(value: int) -> None:
    encoded = varint(value)
    decoded, end = read_varint(encoded, 0)
    assert end == len(encoded)
    assert Field(1, 0, encoded).integer() == value
    assert decoded == (value if value >= 0 else value + 2**64)


@pytest.mark.parametrize(
    "data",
    [
        b"\x08",  # a key, then nothing
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # an 11-byte varint
        b"\x12\x05ab",  # a length past the end
        b"\x0b",  # a group (wire type 3)
        b"\x00\x01",  # field number 0
        b"\x09\x01\x02",  # a truncated fixed64
        struct.pack("<B", 0x3A) + varint(2**40),  # a huge length
    ],
)
def test_malformed_messages_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"truncated|varint|wire type|field number"):
        read_message(data)


def test_random_bytes_never_crash_the_fusion() -> None:
    rng = random.Random(11)
    model_bytes, _ = minilm.checked_model()
    for _ in range(200):
        cut = rng.randrange(1, 4096)
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        for data in (noise, model_bytes[:cut], model_bytes[:cut] + noise):
            try:
                result = int8_weights(data)
            except (ValueError, UnicodeDecodeError):
                continue
            assert result is None or isinstance(result, bytes)

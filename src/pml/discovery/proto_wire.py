"""Just enough of the protobuf wire format to edit an ONNX model without the ``onnx`` package.

A message is read as a list of :class:`Field` (number, wire type, raw payload) in file order
and written back byte for byte, so every field this module does not look at survives an
edit unchanged::

    fields = read_message(data)
    names = [f.text() for f in fields if f.number == 3]
    data = write_message(fields)

Only what :mod:`pml.discovery.int8_matmul` needs: varints, 32/64-bit scalars and
length-delimited payloads (strings, bytes, sub-messages). Groups (wire types 3 and 4) are
refused, as is anything truncated or malformed (``ValueError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

VARINT: Final = 0
FIXED64: Final = 1
LENGTH: Final = 2
FIXED32: Final = 5
_MAX_VARINT_BYTES: Final = 10


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: its number, wire type and payload.

    ``payload`` is the value's bytes: a length-delimited field's contents (without the
    length), the 4 or 8 bytes of a fixed field, or the varint's own bytes.
    """

    number: int
    wire: int
    payload: bytes

    def text(self) -> str:
        """A string field's value."""
        return self.payload.decode("utf-8")

    def integer(self) -> int:
        """A varint field's value (two's complement for negative int64)."""
        value, _ = read_varint(self.payload, 0)
        return value - (1 << 64) if value >= 1 << 63 else value


def read_varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    """The varint at ``at``, and where the next byte starts."""
    value = 0
    for index in range(_MAX_VARINT_BYTES):
        if at + index >= len(data):
            raise ValueError("truncated varint")
        byte = data[at + index]
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, at + index + 1
    raise ValueError("varint longer than 10 bytes")


def varint(value: int) -> bytes:
    """``value`` (negative: as a 64-bit two's complement) encoded as a varint."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def read_message(data: bytes | memoryview) -> list[Field]:
    """Every field of a serialised message, in order."""
    view = memoryview(data)
    fields: list[Field] = []
    at = 0
    while at < len(view):
        key, at = read_varint(view, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == VARINT:
            _, end = read_varint(view, at)
        elif wire == FIXED64:
            end = at + 8
        elif wire == FIXED32:
            end = at + 4
        elif wire == LENGTH:
            size, at = read_varint(view, at)
            end = at + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if end > len(view):
            raise ValueError("truncated field")
        fields.append(Field(number, wire, bytes(view[at:end])))
        at = end
    return fields


def write_field(field: Field) -> bytes:
    """One field, serialised."""
    key = varint(field.number << 3 | field.wire)
    if field.wire == LENGTH:
        return key + varint(len(field.payload)) + field.payload
    return key + field.payload


def write_message(fields: list[Field]) -> bytes:
    """The fields, serialised in order."""
    return b"".join(write_field(field) for field in fields)


def string_field(number: int, value: str) -> Field:
    """A string field."""
    return Field(number, LENGTH, value.encode("utf-8"))


def int_field(number: int, value: int) -> Field:
    """A varint field."""
    return Field(number, VARINT, varint(value))


def message_field(number: int, fields: list[Field]) -> Field:
    """A sub-message field."""
    return Field(number, LENGTH, write_message(fields))

"""Frames between a gateway and the shared embedding process, on a Unix socket.

    send_frame(sock, {"op": "embed", "texts": ["read a file"]})
    header, payload = recv_frame(sock)        # {"ok": True, "rows": 1, "dim": 384}, float32 rows

A frame is two big-endian 4-byte lengths, a JSON object (the header) and raw bytes (the
payload: float32 rows, little-endian, in an answer; empty in a request). Both lengths are
checked against fixed bounds before anything is read, so a broken or hostile peer costs at
most one bounded frame and a ``WireError``.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, Final, cast

from pml.errors import PmlError

PREFIX: Final = struct.Struct(">II")
# A request holds at most MAX_TEXTS texts of at most MAX_TEXT_CHARS characters (4 bytes each
# in UTF-8 at worst), and an answer as many rows of 384 float32. The model reads 256 tokens
# of a text, and a word of up to 100 characters is at least one token: a text cut at
# MAX_TEXT_CHARS keeps its vector unless it is mostly longer words (each one [UNK] token).
MAX_TEXTS: Final = 64
MAX_TEXT_CHARS: Final = 32768
MAX_HEADER: Final = MAX_TEXTS * MAX_TEXT_CHARS * 4 + 4096
MAX_PAYLOAD: Final = MAX_TEXTS * 1024 * 4


class WireError(PmlError):
    """A frame that is not PML's, too large, or cut short (the connection is dropped)."""

    code = "INTERNAL_ERROR"


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    if len(data) > MAX_HEADER or len(payload) > MAX_PAYLOAD:
        raise WireError("an embedding frame is too large to send")
    sock.sendall(PREFIX.pack(len(data), len(payload)) + data + payload)


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The next frame; ``EOFError`` when the peer closed between frames."""
    prefix = _recv_exactly(sock, PREFIX.size, eof_ok=True)
    header_size, payload_size = PREFIX.unpack(prefix)
    if header_size > MAX_HEADER or payload_size > MAX_PAYLOAD:
        raise WireError(f"an embedding frame announces {header_size} + {payload_size} bytes")
    raw = _recv_exactly(sock, header_size)
    try:
        header: object = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise WireError(f"an embedding frame's header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise WireError("an embedding frame's header is not a JSON object")
    return cast(dict[str, Any], header), _recv_exactly(sock, payload_size)


def _recv_exactly(sock: socket.socket, size: int, *, eof_ok: bool = False) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            if eof_ok and left == size:
                raise EOFError
            raise WireError("the embedding connection closed in the middle of a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def checked_texts(header: dict[str, Any]) -> list[str]:
    """The texts of an embed request, or ``WireError`` saying what is wrong with them."""
    texts: object = header.get("texts")
    if not isinstance(texts, list):
        raise WireError("an embed request needs 'texts', a list of strings")
    items = cast(list[object], texts)
    if len(items) > MAX_TEXTS:
        raise WireError(f"an embed request holds at most {MAX_TEXTS} texts")
    if not all(isinstance(text, str) and len(text) <= MAX_TEXT_CHARS for text in items):
        raise WireError(f"each text is a string of at most {MAX_TEXT_CHARS} characters")
    return cast(list[str], items)

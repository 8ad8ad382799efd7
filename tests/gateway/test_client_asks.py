"""Which calls the fast lanes leave to the SDK path because the client may be asked."""

from __future__ import annotations

import mcp_types
import pytest

from pml.gateway.client_asks import envelope_may_ask, may_ask

KEY = mcp_types.CLIENT_CAPABILITIES_META_KEY


@pytest.mark.parametrize(
    ("capabilities", "asks"),
    [
        ({"sampling": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"roots": {"listChanged": True}}, True),
        ({"experimental": {"x": {}}}, False),
        ({}, False),
        (None, False),
        ("sampling", False),
        (["sampling"], False),
        ({"Sampling": {}}, False),
        ({"sampling\u200b": {}}, False),
        (mcp_types.ClientCapabilities(roots=mcp_types.RootsCapability()), True),
        (mcp_types.ClientCapabilities(), False),
    ],
    ids=[
        "sampling",
        "elicitation",
        "roots",
        "experimental",
        "empty",
        "none",
        "text",
        "list",
        "wrong-case",
        "zero-width",
        "model-roots",
        "model-empty",
    ],
)
def test_may_ask(capabilities: object, asks: bool) -> None:
    assert may_ask(capabilities) is asks


@pytest.mark.parametrize(
    ("meta", "asks"),
    [
        ({KEY: {"sampling": {}}}, True),
        ({KEY: {}}, False),
        ({"sampling": {}}, False),
        ({KEY: "sampling"}, False),
        (None, False),
        ("x" * 100_000, False),
    ],
    ids=["declared", "none-declared", "wrong-key", "wrong-type", "no-meta", "huge-text"],
)
def test_envelope_may_ask(meta: object, asks: bool) -> None:
    assert envelope_may_ask(meta) is asks

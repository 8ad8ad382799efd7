"""What travels between replicas about a shared MCP session: ids, owners, replies, notices;
every one of them read from the network or from PostgreSQL is checked before it is used."""

from __future__ import annotations

import json
import uuid

import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml.gateway.session_wire import (
    COUNTER_BITS,
    TAG_BITS,
    Notice,
    is_session_id,
    new_tag,
    owner_hash,
    reply_of,
    session_hash,
    tag_of,
)


def test_the_session_ids_the_sdk_issues_have_the_shape_checked() -> None:
    ids = {uuid.uuid4().hex for _ in range(100)}

    assert all(is_session_id(session_id) for session_id in ids)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0" * 31,
        "0" * 33,
        "A" * 32,
        "g" * 32,
        "' OR 1=1 --" + "0" * 21,
        "é" * 32,
        "0" * 31 + "\n",
    ],
)
def test_anything_else_is_not_a_session_id(value: str) -> None:
    assert is_session_id(value) is False


def test_the_stored_form_of_an_id_is_its_sha256_and_differs_per_id() -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex

    assert len(session_hash(first)) == 64
    assert session_hash(first) == session_hash(first)
    assert session_hash(first) != session_hash(second)
    assert first not in session_hash(first)


def test_two_keys_or_two_scopes_are_two_owners() -> None:
    alice = {"client_id": "k1", "issuer": None, "subject": "acme.web:alice"}
    other_key = {**alice, "client_id": "k2"}
    other_user = {**alice, "subject": "acme.web:bob"}

    owners = {owner_hash(alice), owner_hash(other_key), owner_hash(other_user), owner_hash(None)}  # type: ignore[arg-type]

    assert len(owners) == 4
    assert owner_hash(dict(alice)) == owner_hash(alice)  # type: ignore[arg-type]


def test_a_request_id_names_the_replica_that_sent_it() -> None:
    tag = new_tag()
    first = (tag << COUNTER_BITS) + 1

    assert 0 < tag < 1 << TAG_BITS
    assert tag_of(first) == tag
    assert tag_of(str(first)) == tag


@pytest.mark.parametrize(
    "request_id", [0, 7, -1, "x", "", "1e9", None, (1 << (TAG_BITS + COUNTER_BITS)) + 5]
)
def test_ids_pml_did_not_mint_have_no_tag(request_id: object) -> None:
    assert tag_of(request_id) is None  # type: ignore[arg-type]


def test_a_client_s_answer_is_a_reply_and_its_requests_are_not() -> None:
    answer = {"jsonrpc": "2.0", "id": 5, "result": {"action": "accept"}}
    refusal = {"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "no"}}
    request = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}

    replied = reply_of(json.dumps(answer).encode())
    refused = reply_of(json.dumps(refusal).encode())

    assert isinstance(replied, mcp_types.JSONRPCResponse)
    assert replied.result == {"action": "accept"}
    assert isinstance(refused, mcp_types.JSONRPCError)
    assert reply_of(json.dumps(request).encode()) is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'[{"jsonrpc": "2.0", "id": 1, "result": {}}]',
        b'{"jsonrpc": "2.0", "result": {}}',
        b'{"jsonrpc": "2.0", "id": 1}',
        b'{"jsonrpc": "1.0", "id": 1, "result": {}}',
        b'{"jsonrpc": "2.0", "id": {"nested": 1}, "result": {}}',
        b'{"jsonrpc": "2.0", "id": 1, "error": "no"}',
        b'{"jsonrpc": "2.0", "id": 1, "result": {}, "method": "x"}',
        b"[" * 100_000,
    ],
)
def test_a_body_that_is_no_single_well_formed_reply_is_none(body: bytes) -> None:
    assert reply_of(body) is None


def test_notices_read_back_as_they_were_sent() -> None:
    reply = mcp_types.JSONRPCResponse(jsonrpc="2.0", id=(3 << COUNTER_BITS) + 2, result={"a": 1})
    sent = [Notice("reply", "a" * 64, 3, reply), Notice("closed", "b" * 64)]

    assert [Notice.parse(notice.payload()) for notice in sent] == sent


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "null",
        "[]",
        "{",
        json.dumps({"kind": "reply", "session": "a" * 64}),
        json.dumps({"kind": "reply", "session": "a" * 64, "tag": "3", "reply": {}}),
        json.dumps({"kind": "closed", "session": "short"}),
        json.dumps({"kind": "drop table", "session": "a" * 64}),
        json.dumps({"kind": "closed", "session": 5}),
        "[" * 7000,
        json.dumps(
            {"kind": "reply", "session": "a" * 64, "tag": 3, "reply": {"id": 1, "method": "x"}}
        ),
    ],
)
def test_a_notice_that_is_not_pml_s_is_ignored(payload: str) -> None:
    assert Notice.parse(payload) is None


@given(st.text(max_size=300))
def test_no_text_makes_the_notice_reader_raise(payload: str) -> None:
    parsed = Notice.parse(payload)

    assert parsed is None or parsed.kind in ("reply", "closed")


@given(st.binary(max_size=300))
def test_no_body_makes_the_reply_reader_raise(body: bytes) -> None:
    replied = reply_of(body)

    assert replied is None or isinstance(
        replied, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError
    )

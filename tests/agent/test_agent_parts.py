"""The pieces of ``pml agent`` that need no gateway: history budget, tool-call arguments,
result bounds, "remember" requests, clarification thresholds, and the terminal person
(fed through a real pipe, as a script or an agent's shell would feed it)."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator

import pytest

from pml.agent.clarify import INTENT_WORDS, NONE_OF_THESE, unclear
from pml.agent.dispatch import MAX_ARGUMENT_BYTES, bounded, parse_arguments, result_text
from pml.agent.history import History, estimate_tokens
from pml.agent.model import ApprovalAsk, ConsentAsk
from pml.agent.posthook import remembered_fact
from pml.agent.terminal import LineReader, TerminalPerson, plain
from pml.policy.model import RouterOutput

pytestmark = pytest.mark.anyio


def test_history_keeps_the_newest_exchanges_within_the_budget() -> None:
    history = History(budget_tokens=200)
    for turn in range(50):
        history.add(f"question {turn} " + "x" * 100, f"answer {turn}")
    messages = history.messages()
    assert history.tokens <= 200
    assert messages[-1] == {"role": "assistant", "content": "answer 49"}
    assert messages[-2]["content"].startswith("question 49 ")
    assert "question 0 " not in " ".join(m["content"] for m in messages)
    assert len(messages) % 2 == 0


def test_one_exchange_larger_than_the_budget_is_cut_not_lost() -> None:
    history = History(budget_tokens=300)
    history.add("a" * 100_000, "b" * 100_000)
    (user, assistant) = history.messages()
    assert 0 < len(user["content"]) < 100_000
    assert 0 < len(assistant["content"]) < 100_000
    assert history.tokens <= 300 + 2 * estimate_tokens("")
    history.clear()
    assert history.messages() == []
    assert history.tokens == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"timezone": "Asia/Tokyo"}', {"timezone": "Asia/Tokyo"}),
        ("", {}),
        ("   ", {}),
        ('{"unicode": "日本 \\u202e"}', {"unicode": "日本 \u202e"}),
    ],
)
def test_arguments_that_are_one_object_are_taken(text: str, expected: dict[str, str]) -> None:
    assert parse_arguments(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        '"a string"',
        "42",
        "null",
        "[" * 100_000,
        '{"a": "' + "x" * (MAX_ARGUMENT_BYTES + 1) + '"}',
        "{'single': 'quotes'}",
    ],
    ids=["malformed", "list", "string", "number", "null", "deep", "huge", "python-dict"],
)
def test_arguments_that_are_not_one_object_are_refused_with_a_reason(text: str) -> None:
    refused = parse_arguments(text)
    assert isinstance(refused, str)
    assert "argument" in refused


def test_results_are_bounded_head_and_tail_saying_what_was_left_out() -> None:
    text = "HEAD" + "x" * 50_000 + "TAIL"
    cut = bounded(text, 1000)
    assert cut.startswith("HEAD")
    assert cut.endswith("TAIL")
    assert "characters omitted" in cut
    assert len(cut) < 1100
    assert bounded("short", 1000) == "short"


def test_result_text_reads_text_parts_and_falls_back_to_structured_content() -> None:
    class Part:
        def __init__(self, text: str | None, kind: str = "text") -> None:
            self.text = text
            self.type = kind

    assert result_text([Part("a"), Part("b")], None) == "a\nb"
    assert result_text([Part(None, "image")], None) == "[image]"
    assert result_text([], {"x": 1}) == '{"x": 1}'
    assert result_text("not a list", None) == ""


@pytest.mark.parametrize(
    ("request_text", "fact"),
    [
        ("remember that I prefer metric units", "I prefer metric units"),
        ("Please remember: the staging server is beta.", "the staging server is beta"),
        ("don't forget that standup is at 9", "standup is at 9"),
        ("Remember my card number is 4111", "my card number is 4111"),
        ("note that we deploy on Fridays!", "we deploy on Fridays"),
        ("remember", None),
        ("forget that I like cats", None),
        ("delete my address from memory", None),
        ("what do you remember about me", None),
        ("mémorise que je préfère le thé", None),
    ],
)
def test_a_remember_request_proposes_its_own_words(request_text: str, fact: str | None) -> None:
    assert remembered_fact(request_text) == fact


def _route(confidence: float, decided_by: str) -> RouterOutput:
    return RouterOutput("general", (), "low", confidence, decided_by)


def test_only_unsure_classifications_are_unclear() -> None:
    assert unclear(_route(0.3, "fallback"), 0.65)
    assert unclear(_route(0.6, "heuristic:change"), 0.65)
    assert not unclear(_route(0.8, "heuristic:clock"), 0.65)
    assert not unclear(_route(0.0, "prefix:/file"), 0.65)
    assert not unclear(_route(0.0, "person:clarified"), 0.65)
    assert not unclear(_route(1.0, "direct"), 0.65)


class Pipe:
    """A real pipe whose write end a test may close once (the fixture closes the rest)."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        self.open = {self.read, self.write}

    def type(self, data: bytes, *, end: bool = True) -> None:
        os.write(self.write, data)
        if end:
            self.close(self.write)

    def close(self, fd: int) -> None:
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    made = Pipe()
    yield made
    for fd in list(made.open):
        made.close(fd)


async def test_line_reader_reads_lines_then_the_end_and_cuts_a_huge_line() -> None:
    read, write = os.pipe()
    data = b"first\r\nsecond\n" + b"z" * 300_000 + b"\nlast"

    def feed() -> None:  # more than a pipe holds: written while the reader reads
        with os.fdopen(write, "wb") as stream:
            stream.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    reader = LineReader(read)
    assert await reader.readline() == "first"
    assert await reader.readline() == "second"
    huge = await reader.readline()
    assert huge is not None
    assert 0 < len(huge) <= 100_001
    rest = [await reader.readline() for _ in range(5)]
    assert "last" in [line for line in rest if line is not None][-1]
    assert rest[-1] is None
    writer.join(timeout=10)
    os.close(read)


def _ask() -> ApprovalAsk:
    return ApprovalAsk(
        tool="filesystem:write_file",
        capability="file_write",
        intent="file_edit",
        rule="ask:file_write",
        arguments=[{"name": "path", "value": "/tmp/a\x1b[31mred\u202e"}],
    )


async def test_without_a_terminal_nobody_approves_consents_or_answers(pipe: Pipe) -> None:
    pipe.type(b"always\ny\n1\n", end=False)  # what a script or the model's shell might type
    out = io.StringIO()
    person = TerminalPerson(LineReader(pipe.read), out, interactive=False)
    assert await person.approve(_ask()) == "deny"
    assert await person.consent(ConsentAsk("my card", "PML's memory", ("a card",))) is False
    assert await person.clarify("what is it?", ["a", "b"]) is None
    assert "no terminal" in out.getvalue()


@pytest.mark.parametrize(
    ("typed", "decision"),
    [
        (b"o\n", "once"),
        (b"session\n", "session"),
        (b"A\n", "always"),
        (b"d\n", "deny"),
        (b"\n\n\n", "deny"),
        (b"yes please\nwhat\nnope\n", "deny"),
        (b"\xff\xfe\n", "deny"),
        (b"", "deny"),
    ],
)
async def test_the_person_decides_an_approval_by_typing(
    pipe: Pipe, typed: bytes, decision: str
) -> None:
    pipe.type(typed)
    out = io.StringIO()
    person = TerminalPerson(LineReader(pipe.read), out, interactive=True)
    assert await person.approve(_ask()) == decision
    shown = out.getvalue()
    assert "filesystem:write_file" in shown
    assert "\x1b" not in shown
    assert "\u202e" not in shown


@pytest.mark.parametrize(
    ("typed", "answer"),
    [(b"2\n", "memory"), (b"\n", None), (b"99\n", None), (b"-1\n", None), (b"abc\n", None)],
)
async def test_a_clarifying_answer_is_a_listed_choice_or_nothing(
    pipe: Pipe, typed: bytes, answer: str | None
) -> None:
    pipe.type(typed)
    person = TerminalPerson(LineReader(pipe.read), io.StringIO(), interactive=True)
    assert await person.clarify("which?", ["files", "memory", NONE_OF_THESE]) == answer


def test_plain_escapes_control_and_bidi_characters_and_bounds_length() -> None:
    shown = plain("a\nb\x00c\u202ed" + "x" * 1000, 50)
    assert "\n" not in shown
    assert "\x00" not in shown
    assert "\u202e" not in shown
    assert len(shown) <= 51
    assert set(INTENT_WORDS) >= {"file_task", "memory_write", "general"}

"""The review a person reads (form and shell alike): order, and nothing hidden or spoofed."""

from __future__ import annotations

from pml.policy.approval_review import review_lines, visible
from pml.policy.approval_view import argument_view


def test_visible_escapes_invisible_and_direction_changing_characters() -> None:
    assert visible("a\u202eb\nc\x1bd\u200b\U000e0001") == "a\\u202eb\\nc\\x1bd\\u200b\\U000e0001"
    assert visible(None) == "-"
    assert visible("x" * 400).endswith("…")
    assert len(visible("x" * 400)) == 301


def test_the_review_names_the_call_then_the_target_before_a_long_content() -> None:
    view = {
        "workflowId": "wf_1",
        "status": "pending",
        "tool": "filesystem:write_file",
        "server": "filesystem",
        "capability": "file_write",
        "intent": "file_edit",
        "rule": "default:ask:file_write",
        "user": "erwan",
        "arguments": argument_view({"content": "y" * 10_240, "path": "/srv/report.txt"}),
        "grants": {"once": "only this call of filesystem:write_file\u202e"},
        "expiresAt": "2026-11-26T12:00:00+00:00",
    }
    text = "\n".join(review_lines(view))
    assert text.index("filesystem:write_file") < text.index("/srv/report.txt")
    assert text.index("/srv/report.txt") < text.index("yyyy")
    assert "10240" in text
    assert "\u202e" not in text
    assert "write_file\\u202e" in text
    assert text.splitlines()[-1] == "Expires at 2026-11-26T12:00:00+00:00"


def test_hostile_values_cannot_add_lines_to_the_review() -> None:
    view = {"tool": "fs:w\nDecided by user:boss", "user": "eve\r\nApproval wf_2 (approved)"}
    lines = review_lines(view)
    assert not any(line.startswith(("Decided by", "Approval wf_2")) for line in lines)

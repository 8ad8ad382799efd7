"""The one text a person reads before deciding an approval, wherever they read it: the
elicitation form in their client and ``pml approvals show`` / ``approve`` in their shell.

    lines = review_lines(view)      # view: an approval as ApprovalDesk.view gives it
    print("\\n".join(lines))

Fields come in the order SPEC §10.5 gives: the call (tool, server, permission), the
classified intent and the rule that asked, the capability, who asked, every argument
(target-like ones first, see ``approval_view``), what each choice allows, the expiry.
Every value from the approval is passed through ``visible``: characters that are invisible
or change the text's direction are shown as escapes, so an agent cannot make the review
say something else than what will run.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from pml.policy.approval_view import render_arguments

_HIDDEN: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs"})
VALUE_LIMIT: Final = 300
_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(value: object, limit: int = VALUE_LIMIT) -> str:
    """A value as a person reads it: invisible and direction-changing characters escaped."""
    text = "-" if value is None or value == "" else str(value)
    shown = "".join(_escaped(c) if unicodedata.category(c) in _HIDDEN else c for c in text[:limit])
    return shown if len(text) <= limit else shown + "…"


def revealed(text: str) -> str:
    """Multi-line text (code) as a person reads it: like :func:`visible`, but whole, with
    its line breaks and tabs kept (so a bidi override cannot reorder what code shows)."""
    return "".join(
        c if c in "\n\t" or unicodedata.category(c) not in _HIDDEN else _escaped(c) for c in text
    )


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def review_lines(view: Mapping[str, Any], *, when: Callable[[object], str] = visible) -> list[str]:
    """What a person reads before deciding (``when`` formats the times)."""
    lines = [
        f"Approval {visible(view.get('workflowId'))} ({visible(view.get('status'))})",
        f"  tool:        {visible(view.get('tool'))} (server {visible(view.get('server'))})",
        f"  permission:  {visible(view.get('capability'))}",
        f"  intent:      {visible(view.get('intent'))} "
        f"(stated: {visible(view.get('statedIntent'))})",
        f"  asked by:    rule {visible(view.get('rule'))}",
    ]
    if view.get("capabilityName"):
        lines.append(f"  capability:  {visible(view.get('capabilityName'))}")
    key = f" with API key {visible(view.get('key'))}" if view.get("key") else ""
    lines.append(f"  requested by {visible(view.get('user'))}{key}")
    arguments = _arguments(view.get("arguments"))
    lines.append(
        "Arguments (▶ = where the call acts, listed first):" if arguments else "Arguments: none"
    )
    lines.extend("  " + line for line in render_arguments(arguments))
    grants = view.get("grants")
    if isinstance(grants, dict):
        lines.append("What each choice allows:")
        for choice, covers in cast(dict[object, object], grants).items():
            lines.append(f"  {visible(choice)}: {visible(covers)}")
        lines.append("  deny: nothing; the run stops and nothing is learned")
    lines.append(f"Expires at {when(view.get('expiresAt'))}")
    if view.get("decidedBy"):
        grant = f", grant {visible(view.get('grant'))}" if view.get("grant") else ""
        lines.append(
            f"Decided by {visible(view.get('decidedBy'))}{grant} at {when(view.get('decidedAt'))}"
        )
    return lines


def _arguments(items: object) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [
        cast(dict[str, Any], item) for item in cast(list[object], items) if isinstance(item, dict)
    ]

"""Static analysis of agent snippets: the tools they use, their parameters, the code to store.

``analyze_snippet`` checks a snippet (size first, then syntax, then the ``mcp`` rules), lists
every ``mcp`` reference in source order and infers a parameters schema from ``args`` uses and
from the literal keyword arguments of tool calls (SPEC §4, §6). It also prepares the code to
store, so that a snippet whose secrets cannot be kept out of it is refused before it runs:
literals are lifted by exact source-span edits (``lifting``), then every credential left —
in comments, docstrings, f-string text, bytes, glued constants — is lifted or redacted
(``secret_sweep``), and a last check (``secret_check``) refuses what would still hold one.
The author's formatting and comments stay. ``code_to_store`` adds the FQDN references.

Example::

    >>> code = '''# read the config
    ... cfg = await mcp.fs.read_json(path="/etc/app.json")  # the app's config
    ... return cfg[args.get("section", "main")]'''
    >>> analysis = analyze_snippet(code)
    >>> analysis.calls
    (CallSite(namespace='fs', name='read_json', line=2, column=13, called=True),)
    >>> analysis.parameters_schema["properties"]  # doctest: +NORMALIZE_WHITESPACE
    {'path': {'type': 'string', 'default': '/etc/app.json'},
     'section': {'type': 'string', 'default': 'main'}}
    >>> print(code_to_store(analysis, {("fs", "read_json"): "acme.web.fs.read_json.ab12"}))
    # read the config
    cfg = await mcp["acme.web.fs.read_json.ab12"](path=args["path"])  # the app's config
    return cfg[args.get("section", "main")]
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pml.analysis.code_hash import parse_snippet, tree_hash
from pml.analysis.credentials import looks_secret
from pml.analysis.lifting import Edit, Parameter, Plan, plan_parameters, subscript_text
from pml.analysis.scan import MCP, CallSite, Scan, scan_snippet
from pml.analysis.secret_check import check_stored
from pml.analysis.secret_sweep import SecretNames, apply_edits, sweep_secrets
from pml.errors import CodeSyntaxError, CodeTooLarge, InternalError, InvalidInput

__all__ = [
    "CallSite",
    "Parameter",
    "SnippetAnalysis",
    "analyze_snippet",
    "code_to_store",
    "looks_secret",
]

DEFAULT_MAX_CODE_BYTES = 100_000


@dataclass(frozen=True, slots=True)
class SnippetAnalysis:
    """What a snippet calls and which parameters it takes."""

    code: str
    code_hash: str
    calls: tuple[CallSite, ...]
    parameters: tuple[Parameter, ...]
    # The code as stored, before capabilities are named by FQDN: literals and secrets lifted,
    # credentials in comments and docstrings redacted.
    lifted_code: str = ""

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON Schema of the snippet's ``args`` (extra keys are allowed)."""
        return {
            "type": "object",
            "properties": {p.name: copy.deepcopy(p.schema) for p in self.parameters},
            "required": sorted(p.name for p in self.parameters if p.required),
            "additionalProperties": True,
        }

    def servers_and_tools(self) -> list[tuple[str, str]]:
        """Distinct ``(namespace, name)`` of the references with a namespace, first-seen order."""
        pairs = {(call.namespace, call.name): None for call in self.calls if call.namespace}
        return list(pairs)


def _too_deep() -> CodeSyntaxError:
    message = "Syntax error at line 1, column 1: code is too deeply nested"
    return CodeSyntaxError(message, line=1, column=1)


def _scan_and_plan(code: str) -> tuple[Scan, Plan, str]:
    """The snippet's scan, its lifting plan and its ``normalized_code_hash`` (one parse)."""
    tree = parse_snippet(code)
    try:
        scan = scan_snippet(tree, code)
        return scan, plan_parameters(scan, code), tree_hash(tree)
    except RecursionError:  # a guard: the walks are iterative, literal depth is capped
        raise _too_deep() from None


def check_code(code: str, max_code_bytes: int) -> None:
    """``InvalidInput`` for code that is not a string, ``CodeTooLarge`` past the limit."""
    if not isinstance(code, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("code must be a string", field="code")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_code_bytes:
        raise CodeTooLarge(
            f"Code size exceeds maximum: {size} bytes (max: {max_code_bytes})",
            size=size,
            max=max_code_bytes,
        )


def analyze_snippet(code: str, *, max_code_bytes: int = DEFAULT_MAX_CODE_BYTES) -> SnippetAnalysis:
    """Check and analyse a snippet.

    Raises ``CodeTooLarge`` (checked first), ``CodeSyntaxError``, or ``InvalidInput`` for code
    that is not a string or breaks an ``mcp`` rule (positional arguments to a tool, dynamic
    tool names, ``mcp`` rebound).
    """
    check_code(code, max_code_bytes)
    scan, plan, code_hash = _scan_and_plan(code)
    lifted, parameters = _without_secrets(code, plan)
    return SnippetAnalysis(
        code=code,
        code_hash=code_hash,
        calls=tuple(scan.references_sites()),
        parameters=parameters,
        lifted_code=lifted,
    )


def _parsed(stored: str) -> None:
    try:
        parse_snippet(stored)
    except CodeSyntaxError as exc:
        raise InternalError(f"the code to store does not parse: {exc.message}") from None


def _without_secrets(code: str, plan: Plan) -> tuple[str, tuple[Parameter, ...]]:
    """The code with literals lifted and no credential left; every parameter it takes."""
    lifted = apply_edits(code, list(plan.edits))
    if lifted != code:  # ``code`` itself was parsed already
        _parsed(lifted)
    names = SecretNames({parameter.name for parameter in plan.parameters}, dict(plan.secrets))
    try:
        swept = sweep_secrets(lifted, names)
    except RecursionError:
        raise _too_deep() from None
    if swept.code != lifted:
        _parsed(swept.code)
    parameters = plan.parameters + swept.parameters
    check_stored(swept.code, parameters, read_comments=False)  # comments: redacted above
    return swept.code, parameters


def code_to_store(
    analysis: SnippetAnalysis, capability_fqdns: Mapping[tuple[str, str], str] | None = None
) -> str:
    """The snippet as stored: lifted literals read from ``args``, capabilities named by FQDN.

    Each lifted literal (and secret) becomes ``args["<param>"]``; each reference
    ``mcp.<ns>.<name>`` (or ``mcp.<ns>["<name>"]``) whose ``(ns, name)`` is a key of
    ``capability_fqdns`` becomes ``mcp["<fqdn>"]``. Everything else is kept byte for byte.
    """
    code = (
        analysis.lifted_code or _without_secrets(analysis.code, _scan_and_plan(analysis.code)[1])[0]
    )
    fqdns = capability_fqdns or {}
    if not fqdns:
        return code
    edits: list[Edit] = []
    quotes: dict[tuple[int, int], str | None] = {}
    for reference in scan_snippet(parse_snippet(code), code).references:
        site = reference.site
        fqdn = fqdns.get((site.namespace, site.name)) if site.namespace else None
        if fqdn is not None:
            text = subscript_text(code, reference.place, MCP, fqdn, quotes)
            if text is not None:  # else (inside ``f"{...=}"``) the display name stays
                edits.append(Edit(reference.place.start, reference.place.end, text))
    stored = apply_edits(code, edits)
    _parsed(stored)
    check_stored(stored, analysis.parameters, read_comments=False)  # FQDNs: no comment
    return stored

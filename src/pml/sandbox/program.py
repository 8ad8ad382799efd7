"""Turning a snippet into the source the sandbox runs: checks, then a prelude.

A snippet is checked on the host first: its size (``CodeTooLarge``), its syntax with
CPython's parser (``CodeSyntaxError`` with the snippet's own line and column), and its
imports (modules that reach the host are refused before anything runs). Then a generated
prelude is put in front of it and ``return None`` after it:

- ``mcp``, when the snippet names it: ``mcp.<ns>.<tool>(**kw)``, ``mcp.<ns>["x-y"](**kw)``
  and ``mcp["<fqdn>"](**kw)`` all end in one host function, :data:`BRIDGE`. Monty classes
  have no ``__getattr__``, so ``<ns>`` and ``<tool>`` are looked up among the attribute
  names written in the snippet (every ``.name`` in it); a name only known at run time needs
  the subscript forms.
- ``ToolError``, when named: the exception a failed tool call raises in the snippet. Monty
  has no exception subclasses, so it is ``binascii.Incomplete`` (which nothing in the
  sandbox raises) under that name.
- ``eval``, ``exec``, ``compile``, when named: stand-ins that raise ``NameError``.
- the size guards of :mod:`pml.sandbox.guards` (results and exception messages are
  measured inside the sandbox); names starting with ``_pml`` are refused in snippets.

Line numbers the sandbox reports are shifted back by :attr:`Program.offset`, columns by
:meth:`Program.user_column`.

Example::

    >>> program = prepare("return await mcp.fs.read(path=args['p'])", max_code_bytes=1000)
    >>> program.offset > 0, program.user_lines
    (True, 1)
    >>> program.source.splitlines()[program.offset]
    "return _pml_result((await mcp.fs.read(path=args['p'])))"
"""

from __future__ import annotations

import ast
import threading
from collections import OrderedDict
from dataclasses import dataclass

from pml.analysis.code_hash import parse_snippet
from pml.errors import CodeTooLarge, ExecutionFailed
from pml.sandbox.guards import Guarded, guarded, reserved_name

BRIDGE = "_pml_call"
PROGRAM_CACHE_SIZE = 128
"""The host function behind every tool call: ``_pml_call(namespace, name, args, kwargs)``."""

TOOL_ERROR_MODULE = "binascii"
TOOL_ERROR_CLASS = "Incomplete"
"""The sandbox exception class that is ``ToolError`` in snippets."""

# Modules that would reach the host (Monty's ``os``/``sys``/``pathlib`` answer from a
# deny-all host, the others do not exist in Monty): refused before the run, so a snippet
# cannot even probe them.
BLOCKED_MODULES = frozenset(
    {
        "builtins",
        "ctypes",
        "glob",
        "importlib",
        "io",
        "multiprocessing",
        "os",
        "pathlib",
        "shutil",
        "signal",
        "socket",
        "subprocess",
        "sys",
        "tempfile",
        "threading",
    }
)

_SHADOWED = ("eval", "exec", "compile")

_MCP_CLASSES = f"""\
class _PmlTool:
    def __init__(self, namespace, name):
        self._pml_namespace = namespace
        self._pml_name = name
    def __call__(self, *args, **kwargs):
        return {BRIDGE}(self._pml_namespace, self._pml_name, args, kwargs)
class _PmlMcp:
    def __init__(self, namespaces):
        for namespace in namespaces:
            setattr(self, namespace, _PmlNamespace(namespace))
    def __getitem__(self, name):
        return _PmlTool("", name)
class _PmlNamespace:
    def __init__(self, namespace):
        self._pml_namespace = namespace
    def __getitem__(self, name):
        return _PmlTool(self._pml_namespace, name)
"""

_TOOL_METHOD = f"""\
    def {{name}}(self, *args, **kwargs):
        return {BRIDGE}(self._pml_namespace, {{name!r}}, args, kwargs)
"""

_SHADOW = """\
def {name}(*args, **kwargs):
    raise NameError("name '{name}' is not defined")
"""


@dataclass(frozen=True, slots=True)
class Program:
    """The source to feed; snippet line ``n`` is source line ``n + offset``."""

    source: str
    offset: int
    user_lines: int
    guards: Guarded | None = None

    def user_line(self, line: int) -> int | None:
        """The snippet line of a source line, or ``None`` inside the prelude/epilogue."""
        user = line - self.offset
        return user if 1 <= user <= self.user_lines else None

    def user_column(self, line: int, column: int) -> int:
        """The snippet's column of ``column`` on snippet line ``line`` (guards indent it)."""
        return column if self.guards is None else self.guards.user_column(line, column)


def prepare(code: str, *, max_code_bytes: int) -> Program:
    """Check ``code`` and wrap it; ``CodeTooLarge``, ``CodeSyntaxError``, ``ExecutionFailed``.

    Programs are immutable: the same snippet run again (a capability called by name) reuses
    its checked program (only successes are kept, the ``PROGRAM_CACHE_SIZE`` most recent).
    """
    check_size(code, max_code_bytes)
    return cached_program(code) or remember(code, build_program(code))


def check_size(code: str, max_code_bytes: int) -> None:
    """``CodeTooLarge`` when ``code`` is longer than ``max_code_bytes`` in UTF-8."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_code_bytes:
        raise CodeTooLarge(f"Code size exceeds maximum: {size} bytes (max: {max_code_bytes})")


def cached_program(code: str) -> Program | None:
    """``code``'s program if one was built recently (see ``prepare``)."""
    with _programs_lock:
        found = _programs.get(code)
        if found is not None:
            _programs.move_to_end(code)
        return found


def remember(code: str, program: Program) -> Program:
    """Keep ``program`` as ``code``'s (built here, or by the checking process of
    ``pml.sandbox.study``)."""
    with _programs_lock:
        _programs[code] = program
        _programs.move_to_end(code)
        while len(_programs) > PROGRAM_CACHE_SIZE:
            _programs.popitem(last=False)
    return program


def build_program(code: str) -> Program:
    """The checks and the wrapping, uncached and without the size check."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    tree = parse_snippet(code)
    names, attributes = _scan(tree)
    _check_reserved(tree)
    prelude = _prelude(names, attributes)
    guards = guarded(code)
    if guards is not None:  # else the host-side checks stand alone
        prelude, code = prelude + guards.functions, guards.code
    return Program(
        source=f"{prelude}{code}\nreturn None\n",
        offset=prelude.count("\n"),
        user_lines=code.count("\n") + 1,
        guards=guards,
    )


_programs: OrderedDict[str, Program] = OrderedDict()
_programs_lock = threading.Lock()


def _check_reserved(tree: ast.Module) -> None:
    found = reserved_name(tree)
    if found is not None:
        name, line = found
        message = f"name '{name}' is reserved (names starting with _pml are PML's)"
        raise ExecutionFailed(
            f"NameError: {message} (line {line})", exception_type="NameError", line=line
        )


def _scan(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names read or written, attribute names; refuses blocked imports."""
    names: set[str] = set()
    attributes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            _check_import(node)
    return names, attributes


def _check_import(node: ast.Import | ast.ImportFrom) -> None:
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    else:
        modules = [node.module] if node.module and node.level == 0 else []
    for module in modules:
        root = module.partition(".")[0]
        if root in BLOCKED_MODULES:
            message = f"module '{root}' is not available in snippets"
            raise ExecutionFailed(
                f"ModuleNotFoundError: {message} (line {node.lineno})",
                exception_type="ModuleNotFoundError",
                line=node.lineno,
            )


def _prelude(names: set[str], attributes: set[str]) -> str:
    parts: list[str] = []
    if "mcp" in names:
        members = sorted(name for name in attributes if _is_member_name(name))
        parts.append(_MCP_CLASSES)
        parts.extend(_TOOL_METHOD.format(name=name) for name in members)
        parts.append(f"mcp = _PmlMcp({tuple(members)!r})\n")
    if "ToolError" in names:
        parts.append(f"from {TOOL_ERROR_MODULE} import {TOOL_ERROR_CLASS} as ToolError\n")
    parts.extend(_SHADOW.format(name=name) for name in _SHADOWED if name in names)
    return "".join(parts)


def _is_member_name(name: str) -> bool:
    """Attribute names usable as a namespace or a tool: not special, not ours."""
    dunder = name.startswith("__") and name.endswith("__")
    return name.isascii() and not dunder and not name.startswith("_pml")

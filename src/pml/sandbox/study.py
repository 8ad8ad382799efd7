"""Large snippets checked by the gateway's child process, the tenants in turn.

    analysis = await study.analysis(code, max_code_bytes, tenant)  # keeps its program too
    program = await study.program(code, max_code_bytes, tenant)    # what the sandbox runs

Before a snippet runs, PML analyses it (calls, parameters, secrets: ``pml.analysis``) and
builds the program the sandbox runs (``pml.sandbox.program``). Both are pure Python: for a
snippet of a few KB they take milliseconds and run where the request arrives; for ~80 KB
they took ~1 s of CPU (0.7 s analysis, 0.25 s program), which in the gateway's interpreter
was every other tenant's wait. A snippet over ``INLINE_BYTES`` is checked by the child
process of ``pml.cpu_process`` (one job at a time, the tenants in turn, 10 s of CPU at most),
both results in one round trip; its program is kept for the run that follows, and a program
that failed is remembered so that running it again does not build it again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

from pml import cpu_process
from pml.analysis.snippet import SnippetAnalysis
from pml.errors import LimitExceeded, PmlError
from pml.sandbox.base import TenantKey
from pml.sandbox.program import Program, build_program, cached_program, check_size, remember

INLINE_BYTES: Final = 4096
_REMEMBERED_FAILURES: Final = 64
_failures: OrderedDict[str, PmlError] = OrderedDict()  # recent codes whose program failed


def is_large(code: str) -> bool:
    """Checked by the child process rather than where it arrives."""
    return len(code) > INLINE_BYTES or len(code.encode("utf-8", "surrogatepass")) > INLINE_BYTES


async def analysis(code: str, max_code_bytes: int, tenant: TenantKey | None) -> SnippetAnalysis:
    """The analysis of a large ``code`` (checked against ``max_code_bytes``); its program is
    kept for the run that follows."""
    return _value((await _studied(code, max_code_bytes, tenant))[0])


async def program(code: str, max_code_bytes: int, tenant: TenantKey | None) -> Program:
    """``code``'s sandbox program: kept, built here (small), or built by the child."""
    check_size(code, max_code_bytes)
    found = cached_program(code)
    if found is not None:
        return found
    failed = _failures.get(code)
    if failed is not None:
        raise type(failed)(failed.message, **failed.data)
    if not is_large(code):
        return remember(code, build_program(code))
    size = len(code.encode("utf-8", "surrogatepass"))
    return _value((await _studied(code, size, tenant))[1])


async def _studied(code: str, max_code_bytes: int, tenant: TenantKey | None) -> tuple[Any, Any]:
    try:
        analysed, built = await cpu_process.run("study", (code, max_code_bytes), tenant)
    except LimitExceeded as error:  # out of CPU time: neither was built
        analysed = built = error
    if isinstance(built, Program):
        remember(code, built)
    elif isinstance(built, PmlError):
        _failures[code] = built
        while len(_failures) > _REMEMBERED_FAILURES:
            _failures.popitem(last=False)
    return analysed, built


def _value(outcome: Any) -> Any:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome

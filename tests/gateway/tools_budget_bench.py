"""``benchmarks/context.py`` for the tools/list budget tests, loaded from its file.

``benchmarks/`` is never put on ``sys.path``: its ``agent.py`` would shadow the tests'
``agent`` package for the whole run.

    from gateway.tools_budget_bench import encoder, fill_named, generate
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any

import tiktoken

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pml_benchmark_context", BENCHMARKS / "context.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONTEXT = _load()

encoder: Callable[[], tiktoken.Encoding] = _CONTEXT.encoder
fill_named: Callable[..., Coroutine[Any, Any, None]] = _CONTEXT.fill_named
reference_tools: Callable[[], list[dict[str, Any]]] = _CONTEXT.reference_tools
synthetic_catalog: Callable[..., list[dict[str, Any]]] = _CONTEXT.synthetic_catalog
generate: Callable[..., list[dict[str, Any]]] = _CONTEXT.generate

__all__ = ["encoder", "fill_named", "generate", "reference_tools", "synthetic_catalog"]

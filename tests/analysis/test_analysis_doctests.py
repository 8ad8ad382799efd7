"""The usage examples in the analysis modules' docstrings stay true."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from pml.analysis import credentials, lifting, literals, scan, snippet, source_map


@pytest.mark.parametrize(
    "module", [credentials, lifting, literals, scan, snippet, source_map], ids=lambda m: m.__name__
)
def test_docstring_examples(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0

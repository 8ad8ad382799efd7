"""The usage examples in the analysis modules' docstrings stay true."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from pml.analysis import (
    basic_credentials,
    bindings,
    config_secrets,
    credential_flow,
    credentials,
    encoded_secrets,
    folding,
    fstring_secrets,
    lifting,
    literals,
    prose_credentials,
    scan,
    secret_check,
    secret_comments,
    secret_pairs,
    secret_params,
    secret_sweep,
    secret_text,
    snippet,
    source_map,
)

MODULES = [
    basic_credentials,
    bindings,
    config_secrets,
    credential_flow,
    credentials,
    encoded_secrets,
    folding,
    fstring_secrets,
    lifting,
    literals,
    prose_credentials,
    scan,
    secret_check,
    secret_comments,
    secret_pairs,
    secret_params,
    secret_sweep,
    secret_text,
    snippet,
    source_map,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0

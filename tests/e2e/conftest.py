"""Fixtures of the end-to-end tests: the pinned npm servers, real upstreams, a fresh workdir.

The npm side (reference servers, MCP Inspector, Node 22) is installed once per run by
``scripts/e2e-deps.sh`` into ``.e2e/node_modules``. Under ``CI=true`` an install failure
fails the run; elsewhere the e2e tests skip and say why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from e2e.support import (
    E2eSetupError,
    NpmDeps,
    Upstream,
    install_npm_deps,
    reference_servers,
)

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _unavailable(message: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"{message} (CI=true requires the end-to-end suite)")
    pytest.skip(
        f"{message}; run scripts/e2e-deps.sh (needs npm and the npm registry) or set CI=true "
        "to make this a failure"
    )


@pytest.fixture(scope="session")
def npm_deps() -> NpmDeps:
    """The pinned npm packages, installed (or found installed) once per run."""
    try:
        return install_npm_deps()
    except E2eSetupError as error:
        _unavailable(f"e2e npm dependencies unavailable: {error}")


@pytest.fixture
def servers(npm_deps: NpmDeps, tmp_path: Path) -> dict[str, Upstream]:
    """time, git, filesystem, memory and everything, on private folders of this test."""
    try:
        return reference_servers(npm_deps, tmp_path)
    except E2eSetupError as error:
        _unavailable(str(error))

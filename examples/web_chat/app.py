"""The web chat example's backend: a FastAPI app whose ``/api/chat`` runs each message of the
page's ``useChat`` as a Coder agent turn (with a client tool, ``get_weather``) and streams it
back as an AI SDK UI message stream; ``/api/chat/{id}/stream`` serves ``useChat``'s resume.

Run it with one command from the repository root (Python 3.11+, Node.js and npm)::

    .venv/bin/python -m examples.web_chat          # http://127.0.0.1:8000

Without ``CODER_URL`` it starts the built-in fake Coder server, scripted to answer weather
questions with a reasoning block, a ``get_weather`` call and an answer; with ``CODER_URL``,
``CODER_SESSION_TOKEN`` and ``CODER_ORGANIZATION_ID`` set the chats run on that deployment
(``--fake`` forces the fake). The page is built on first use (``npm ci`` and esbuild, into
``static/app.js``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from coder_integrations.ai_sdk import ChatBridge, ChatRequest, ChatSession
from coder_io_asyncio import CoderAgent, CoderChatClient, tool

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
BUNDLE = STATIC / "app.js"

INSTRUCTIONS = "You answer weather questions. Use get_weather for current conditions."


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "temp_c": 21, "sky": "clear"}


def create_app(
    connection: Mapping[str, str] | None = None,
    *,
    authorize: Callable[[Request], Any] | None = None,
) -> FastAPI:
    """The app. ``connection`` is ``base_url``, ``token`` and ``organization_id`` (default:
    ``CODER_URL``, ``CODER_SESSION_TOKEN``, ``CODER_ORGANIZATION_ID``). ``authorize`` is the
    bridge's sign-in hook (docs/ai-sdk.md "Users"); without it the app is a one-person app,
    as run on a laptop."""
    settings = dict(connection or {})
    clients: list[CoderChatClient] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # One client for every request: its connections are reused across turns.
        async with CoderChatClient(settings.get("base_url"), settings.get("token")) as client:
            clients.append(client)
            yield
            clients.clear()

    def make_agent(request: ChatRequest, session: ChatSession) -> CoderAgent:
        return CoderAgent(
            client=clients[0],
            organization_id=settings.get("organization_id"),
            instructions=INSTRUCTIONS,
            tools=[get_weather],
            request_timeout=120,
            **session.agent_kwargs(),
        )

    bridge = ChatBridge(make_agent, authorize=authorize)
    app = FastAPI(title="Coder agent chat", lifespan=lifespan)
    app.state.bridge = bridge

    @app.post("/api/chat")
    async def chat(request: Request) -> Any:
        return await bridge.handle(request)

    @app.get("/api/chat/{chat_id}/stream")
    async def resume(request: Request, chat_id: str) -> Any:
        return await bridge.handle_resume(request, chat_id)

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def build_page(force: bool = False) -> Path:
    """Install the page's npm packages (``npm ci``) and bundle it with esbuild, unless the
    bundle is newer than its sources. Returns the bundle's path."""
    sources = [HERE / "src" / "app.jsx", HERE / "package-lock.json"]
    if (
        not force
        and BUNDLE.exists()
        and all(BUNDLE.stat().st_mtime >= s.stat().st_mtime for s in sources)
    ):
        return BUNDLE
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building the page needs Node.js and npm")
    if not (HERE / "node_modules" / "@ai-sdk" / "react").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True)
    subprocess.run([npm, "run", "--silent", "build"], cwd=HERE, check=True)
    return BUNDLE


def weather_script(ctx: Any) -> Any:
    """The fake model's answer to a weather question: reasoning, a ``get_weather`` call for
    the city named in the prompt, then the answer in words, built from the tool's result."""
    from coder_proto.fake import CallClientTool, Say, Script, Think

    found = re.search(r"\bin ([A-Z][\w-]*(?: [A-Z][\w-]*)*)", ctx.prompt)
    city = found.group(1) if found else "Paris"
    return Script(
        [
            Think(f"The user asks about {city}; let me check the forecast."),
            CallClientTool(name="get_weather", args={"city": city}),
            Say(
                f"Right now it is {{tool_result.temp_c}} °C in {city}, and the sky is "
                "{tool_result.sky}. Enjoy your day!",
                chunk=6,
            ),
        ]
    )


def start_fake() -> Any:
    """A fake Coder server (in its own thread) scripted for weather questions."""
    from coder_integrations.fake_server import FakeCoderServer

    server = FakeCoderServer(chunk_delay=0.02)
    server.config.scripts.add(r"(?i)weather", weather_script)
    server.start()
    return server


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m examples.web_chat", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--fake", action="store_true", help="use the fake Coder server")
    args = parser.parse_args(argv)
    build_page()
    fake = None
    if args.fake or not os.environ.get("CODER_URL"):
        fake = start_fake()
        connection = {"base_url": fake.url, "token": fake.token,
                      "organization_id": fake.organization_id}
        print(f"fake Coder server at {fake.url}")
    else:
        connection = {}
    print(f"open http://{args.host}:{args.port}/")
    try:
        uvicorn.run(create_app(connection), host=args.host, port=args.port, log_level="warning")
    finally:
        if fake is not None:
            fake.stop()

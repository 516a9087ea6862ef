"""The fake Coder server on loopback: the pure model (``coder_proto.fake``) served over real
HTTP/1.1 (h11) and WebSocket (wsproto) connections on asyncio.

``FakeCoderServer`` is usable three ways, whatever runtime the client under test uses:

* ``with FakeCoderServer() as server:`` runs its own event loop in a thread, so blocking and
  trio code can use it;
* ``async with FakeCoderServer() as server:`` runs in the caller's asyncio loop;
* ``coder-agent fake-server --port N`` serves until interrupted (see ``docs/fake-server.md``).

``server.url``, ``server.token`` and ``server.organization_id`` are what a client needs.
``server.model``, ``server.config``, ``server.faults`` and ``server.counters`` give
thread-safe access to the model: every attribute read, write and method call on them holds
the server's lock and wakes the server afterwards, so faults can be changed while clients are
connected, from any thread.

Example::

    from coder_integrations.fake_server import FakeCoderServer
    from coder_proto.fake import CallClientTool, Say, Script

    with FakeCoderServer(chunk_delay=0.001) as server:
        server.config.scripts.add(
            r"weather in (?P<city>\\w+)",
            Script([CallClientTool(name="get_weather", args={"city": "{city}"}),
                    Say("It is {tool_result.temp_c} degrees in {city}.")]),
        )
        server.faults.drop_stream_after_frames(3)      # the first stream drops mid-turn
        ...  # point a client at server.url with server.token
        assert server.wait_idle()                      # nothing leaked

The serving loop contains no policy: routes, status codes, body limits, frames, drops and
timings all come from the model. It moves bytes, bounds what it reads (request heads, and
bodies by their route's limit: an oversized body is answered 413 before it is read), sends
WebSocket pings, closes a connection whose client sends a data frame (1008: the server never
reads), and counts open connections. Clients leave as they like: a close frame is answered, a
connection that simply ends is over at once, and nothing is sent after either. Stopping closes
every connection with 1001 and never waits more than a second for a client that stopped
reading.
"""

from typing import TYPE_CHECKING

from coder_proto.adapter import lazy_exports

if TYPE_CHECKING:
    from ._server import FakeCoderServer as FakeCoderServer

__all__ = ["FakeCoderServer"]

# The serving loop is imported on first use: ``coder-agent --help`` reads the flags of
# ``fake-server`` (``command``) without it.
__getattr__, __dir__ = lazy_exports(__name__, {"._server": ("FakeCoderServer",)})

"""coder_io_common: what the adapters (``coder_io_asyncio``, ``coder_io_trio``,
``coder_io_sync``) share and the core may not hold because it touches the outside world.

* ``_async``: the async layer of ``coder_io_asyncio`` and ``coder_io_trio`` (driver, client,
  watch, agent, durable functions), written once over a runtime interface each of them
  supplies;
* ``tls``: the TLS context of the stream sockets, from the ``verify`` choices httpx offers
  (the core must not import ``ssl``);
* ``files``: reading a path whole or under the upload cap (blocking file I/O, run in a worker
  thread by the event-loop adapters);
* ``wallclock``: the wall-clock stamps the core takes as inputs (transcript headers,
  transport-event timestamps);
* ``stores``: the durable stores (SQLite; PostgreSQL with the ``postgres`` extra), usable from
  every adapter.
* ``observer``: the hooks an agent calls around its turns, client tools and session events;
  ``instrumentation.instrument`` turns on the OpenTelemetry observer behind them, which it
  finds through the entry-point group ``coder_agents.instrumentation`` when called (this
  package imports nothing of ``coder_integrations``).

Everything else runtime-independent lives in ``coder_proto``. What stands on top of the
adapters (the fake server's serving loop, the pytest plugin, OpenTelemetry, the AI SDK bridge)
lives in ``coder_integrations``.
"""

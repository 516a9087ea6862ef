"""coder_integrations: what stands on top of the adapters and plugs coder-agents into other
tools. Nothing below it (``coder_proto``, ``coder_io_common``, the three adapters) imports it
or names one of its modules; each module imports its own extras only when it is used.

* ``cli``: the ``coder-agent`` command line (docs/cli.md), a program on the blocking adapter;
* ``fake_server``: the fake Coder server's serving loop (``FakeCoderServer``), which serves
  ``coder_proto.fake`` on loopback for every runtime's tests and for ``coder-agent
  fake-server``;
* ``pytest_plugin``: the pytest plugin (the ``pytest11`` entry point ``coder_agents``): a fake
  deployment, agents and clients of every adapter as fixtures;
* ``otel``: the OpenTelemetry observer (the ``otel`` extra, docs/observability.md), turned on
  by ``instrument``, which every adapter re-exports and which loads this module when called,
  through the entry point ``otel`` of the group ``coder_agents.instrumentation``;
* ``ai_sdk``: the bridge between an agent turn and the AI SDK's UI message stream
  (docs/ai-sdk.md).
"""

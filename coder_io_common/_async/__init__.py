"""The async layer of the event-loop adapters, written once over a runtime interface.

``coder_io_asyncio`` and ``coder_io_trio`` are this layer on their runtime: each supplies an
``AsyncRuntime`` (``runtime``: tasks owned by a client, worker threads, events, a timer, task
groups, its cancellation, and its stream sockets) and names it on its classes; neither
imports the other. The modules:

* ``driver``: ``Driver`` and ``TaskHandle``, performing the commands of ``coder_proto.Connection``
  (REST through ``httpx.AsyncClient``, the runtime's sockets, tool batches, the timer);
* ``client``: ``CoderChatClient`` (the raw operations, the watch);
* ``watch``: ``ChatWatch``;
* ``agent``: ``CoderAgent`` and ``AgentStream``;
* ``durable``: ``run_turn``, ``archive_workflow``, ``sweep_orphans``, ``bind_tools``.
"""

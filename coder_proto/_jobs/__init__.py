"""Jobs: REST procedures run on the engine (``coder_proto._engine``). The raw client's
operations as machines, the default organization (D33), and stopping and retiring chats."""

"""REST: the HTTP values the core hands out and takes back, the chat-prefix negotiation, and
one builder and one classifier per route. The machines that send these requests are in
``coder_proto._jobs``, over the engine."""

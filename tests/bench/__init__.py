"""Benchmarks: the cost of the client per streamed event, as ratios to floors measured in the
same run (``python -m tests.bench``; see ``__main__`` for the options).

1. ``core``: frame text in, output parts out, against ``json.loads`` of the same frames;
2. ``scaling``: the same at 1k/10k/100k deltas, and with the whole stream buffered first;
3. ``e2e``: the fake server streams a transcript over loopback to ``agent.stream().text_stream``
   on each runtime, against a bare socket + wsproto + ``json.loads`` reader;
4. ``memory``: peak RSS growth of a long turn through ``stream()`` and ``generate()``;
5. ``fleet``: many concurrent chats in one asyncio process: memory per open chat, CPU per delta.

Inputs are the reference transcripts, generated into ``tests/bench/_data/`` by
``../shared/bench/gen_transcript.py``.
"""

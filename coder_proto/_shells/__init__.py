"""The runtime-independent half of the adapters' public classes: every ``CoderChatClient``
operation, the ``CoderAgent`` constructor and plain operations, and the ``ChatWatch``
consumer, defined once so that an adapter only performs I/O."""

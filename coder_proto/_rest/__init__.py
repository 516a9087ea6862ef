"""REST: the HTTP values the core hands out and takes back, the chat-prefix negotiation, one
builder and one classifier per route, and the machines that run the raw client's operations
and stop or retire chats."""

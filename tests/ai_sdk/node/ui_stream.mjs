// Runs the AI SDK's own chat client code on what the Python bridge produces.
//
//   node ui_stream.mjs request  < {"chatId", "text", "file"?}
//     prints the JSON body the AI SDK's HTTP chat transport posts for a user message
//   node ui_stream.mjs read     < {"status", "headers", "body"}
//     feeds the response (headers and SSE body) through the transport's own response
//     parsing and readUIMessageStream, then prints {"message", "errors", "chunks"}:
//     the final UI message, the stream errors it reported, and the parsed chunk types
import { DefaultChatTransport, readUIMessageStream } from 'ai';

const input = JSON.parse(await new Response(process.stdin).text());
const mode = process.argv[2];

if (mode === 'request') {
  let posted;
  const transport = new DefaultChatTransport({
    api: 'http://127.0.0.1:9/api/chat',
    fetch: async (url, init) => {
      posted = JSON.parse(init.body);
      return new Response('data: [DONE]\n\n', {
        headers: { 'content-type': 'text/event-stream' },
      });
    },
  });
  const parts = [{ type: 'text', text: input.text }];
  if (input.file) parts.push({ type: 'file', ...input.file });
  await transport.sendMessages({
    chatId: input.chatId,
    messages: [{ id: 'user-1', role: 'user', parts }],
    abortSignal: undefined,
    trigger: 'submit-message',
    messageId: undefined,
    body: input.body,
  });
  console.log(JSON.stringify(posted));
} else if (mode === 'read') {
  const transport = new DefaultChatTransport({
    api: 'http://127.0.0.1:9/api/chat',
    fetch: async () =>
      new Response(input.body, { status: input.status, headers: input.headers }),
  });
  const chunkStream = await transport.sendMessages({
    chatId: 'chat',
    messages: [],
    abortSignal: undefined,
    trigger: 'submit-message',
    messageId: undefined,
  });
  const [forReader, forTypes] = chunkStream.tee();
  const chunks = [];
  const collecting = (async () => {
    for await (const chunk of forTypes) chunks.push(chunk.type);
  })();
  const errors = [];
  let message = null;
  for await (const snapshot of readUIMessageStream({
    stream: forReader,
    onError: error => errors.push(String(error && error.message ? error.message : error)),
  })) {
    message = snapshot;
  }
  await collecting;
  console.log(JSON.stringify({ message, errors, chunks }));
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}

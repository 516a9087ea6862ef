// The web chat page: the AI SDK's own useChat hook talks to the Python backend's /api/chat,
// which runs each message as a Coder agent turn and answers with a UI message stream.
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useState } from 'react';
import { createRoot } from 'react-dom/client';

const transport = new DefaultChatTransport({ api: '/api/chat' });

function ToolPart({ part }) {
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
  return (
    <div className="tool" data-testid="tool-call" data-state={part.state}>
      <div className="tool-name">{name}</div>
      <pre className="tool-input">{JSON.stringify(part.input)}</pre>
      {part.state === 'output-available' && (
        <pre className="tool-output" data-testid="tool-output">{JSON.stringify(part.output)}</pre>
      )}
      {part.state === 'output-error' && <pre className="tool-error">{part.errorText}</pre>}
    </div>
  );
}

function Part({ part }) {
  if (part.type === 'text') return <p className="text">{part.text}</p>;
  if (part.type === 'reasoning') return <p className="reasoning">{part.text}</p>;
  if (part.type === 'source-url')
    return <a className="source" href={part.url}>{part.title || part.url}</a>;
  if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) return <ToolPart part={part} />;
  return null;
}

function Usage({ metadata }) {
  if (!metadata || !metadata.usage) return null;
  const { inputTokens, outputTokens } = metadata.usage;
  return <div className="usage">{inputTokens} in / {outputTokens} out tokens</div>;
}

function App() {
  const { messages, sendMessage, status, error } = useChat({ transport });
  const [input, setInput] = useState('');
  const submit = event => {
    event.preventDefault();
    if (!input.trim()) return;
    sendMessage({ text: input });
    setInput('');
  };
  return (
    <main>
      <h1>Coder agent chat</h1>
      <div className="messages">
        {messages.map(message => (
          <div key={message.id} className={`message ${message.role}`} data-role={message.role}>
            {message.parts.map((part, index) => <Part key={index} part={part} />)}
            {message.role === 'assistant' && <Usage metadata={message.metadata} />}
          </div>
        ))}
      </div>
      {error && <div className="error" data-testid="error">{error.message}</div>}
      <form onSubmit={submit}>
        <input
          data-testid="prompt"
          value={input}
          placeholder="Ask about the weather…"
          onChange={event => setInput(event.target.value)}
        />
        <button type="submit" data-testid="send" disabled={status !== 'ready'}>Send</button>
      </form>
      <div className="status" data-testid="status">{status}</div>
    </main>
  );
}

createRoot(document.getElementById('root')).render(<App />);

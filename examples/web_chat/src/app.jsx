// The web chat page: the AI SDK's own useChat hook talks to the Python backend's /api/chat,
// which runs each message as a Coder agent turn and answers with a UI message stream.
//
// The chat's id lives in the address (?chat=...), so a reload, or a second tab on the same
// address, picks up a turn that is still running (useChat's resume: GET /api/chat/{id}/stream).
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useState } from 'react';
import { createRoot } from 'react-dom/client';

const transport = new DefaultChatTransport({ api: '/api/chat' });

function chatIdOfPage() {
  const url = new URL(window.location.href);
  let id = url.searchParams.get('chat');
  if (!id) {
    id = crypto.randomUUID();
    url.searchParams.set('chat', id);
    window.history.replaceState(null, '', url);
  }
  return id;
}

const chatId = chatIdOfPage();

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

// What a message shows: an assistant message that failed before any content has nothing to
// show, and gets no bubble.
const visible = message => message.parts.some(part => part.type !== 'step-start');

function Usage({ metadata }) {
  if (!metadata || !metadata.usage) return null;
  const { inputTokens, outputTokens } = metadata.usage;
  return <div className="usage">{inputTokens} in / {outputTokens} out tokens</div>;
}

function App() {
  const { messages, sendMessage, regenerate, status, error, stop, clearError } = useChat({
    id: chatId,
    transport,
    resume: true,
  });
  const [input, setInput] = useState('');
  // The user message being edited: sending replaces it (and drops what followed it).
  const [editing, setEditing] = useState(null);
  const busy = status === 'submitted' || status === 'streaming';
  const submit = event => {
    event.preventDefault();
    if (!input.trim() || busy) return;
    if (error) clearError();
    sendMessage(editing ? { text: input, messageId: editing } : { text: input });
    setInput('');
    setEditing(null);
  };
  const startEdit = message => {
    setEditing(message.id);
    setInput(message.parts.filter(part => part.type === 'text').map(part => part.text).join(''));
  };
  const shown = messages.filter(visible);
  const last = shown[shown.length - 1];
  return (
    <main>
      <h1>Coder agent chat</h1>
      <div className="messages">
        {shown.map(message => (
          <div
            key={message.id}
            className={`message ${message.role}`}
            data-role={message.role}
            data-id={message.id}
          >
            {message.parts.map((part, index) => <Part key={index} part={part} />)}
            {message.role === 'assistant' && <Usage metadata={message.metadata} />}
            {message.role === 'user' && !busy && (
              <button type="button" className="link" data-testid="edit" onClick={() => startEdit(message)}>
                Edit
              </button>
            )}
            {message === last && message.role === 'assistant' && !busy && (
              <button type="button" className="link" data-testid="regenerate" onClick={() => regenerate()}>
                Regenerate
              </button>
            )}
          </div>
        ))}
      </div>
      {error && <div className="error" data-testid="error" role="alert">{error.message}</div>}
      <form onSubmit={submit}>
        <input
          data-testid="prompt"
          value={input}
          placeholder={editing ? 'Edit your message…' : 'Ask about the weather…'}
          onChange={event => setInput(event.target.value)}
        />
        {busy ? (
          <button type="button" data-testid="stop" onClick={() => stop()}>Stop</button>
        ) : (
          <button type="submit" data-testid="send">Send</button>
        )}
      </form>
      <div className="status" data-testid="status">{status}</div>
    </main>
  );
}

createRoot(document.getElementById('root')).render(<App />);

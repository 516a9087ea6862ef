"""``coder-agent chat``: an interactive multi-turn session on one chat.

Each line typed is one turn of the same ``CoderAgent`` (so the model sees the history), its
answer streamed as it comes. Lines starting with ``/`` are commands (``COMMANDS``). Ctrl-C
during a turn interrupts that turn's run on the server and the session goes on; Ctrl-C at the
prompt clears the line. Ctrl-D (end of input), ``/quit`` or SIGTERM end the session: the chat
is kept, and its id and cursor are printed on stderr to continue it with ``--chat-id``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, TextIO

from . import common
from .screen import Printer, Progress, is_terminal
from .tools import ToolsError, load_tools

__all__ = ["COMMANDS", "add_arguments", "run_chat"]

#: The slash commands, with what they do (``/help`` prints this).
COMMANDS: dict[str, str] = {
    "/reset": "start a new chat on the next message (the current one is kept)",
    "/interrupt": "interrupt the chat's run on the server",
    "/archive": "archive the chat; the next message starts a new one",
    "/help": "list the commands",
    "/quit": "end the session (as Ctrl-D does); the chat is kept",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``chat`` beside the deployment's."""

    parser.add_argument("--fake", action="store_true", help="chat with an in-process fake server")
    parser.add_argument("--chat-id", default=None, help="continue this chat")
    parser.add_argument(
        "--last-seen-message-id",
        type=common._cursor,
        default=None,
        help="the resume cursor printed when the chat was left (needs --chat-id)",
    )
    parser.add_argument(
        "-c",
        "--continue",
        dest="continue_chat",
        action="store_true",
        help="continue the chat this deployment used last (from coder-agent log)",
    )


class _Chat:
    """One interactive session."""

    def __init__(
        self, agent: Any, out: TextIO, err: TextIO, progress: Progress, url: str | None = None
    ) -> None:
        self.agent = agent
        self.url = url
        self.out = out
        self.err = err
        self.progress = progress
        #: The first prompt of the current chat, for the local log.
        self.first_prompt = ""

    def say(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def turn(self, prompt: str, terminated: Any) -> None:
        """One turn, streamed; a failure or a Ctrl-C ends the turn, not the session."""
        from coder_proto import CoderAgentError

        if self.agent.chat_id is None:
            self.first_prompt = prompt
        printer = Printer(self.out, progress=self.progress)
        self.progress.start()
        try:
            with self.agent.stream(prompt) as stream:
                for part in stream:
                    printer.part(part)
                result = stream.get_final_result()
        except KeyboardInterrupt:
            printer.finish()
            self.progress.stop()
            if terminated():
                raise
            self.say("[interrupted: the run was stopped on the server]")
            return
        except (CoderAgentError, TimeoutError) as exc:
            printer.finish()
            self.progress.stop()
            if isinstance(exc, TimeoutError) or getattr(exc, "kind", None) == "timeout":
                self.say("[the --timeout deadline passed: the run was interrupted]")
            else:
                self.say(f"[the turn failed: {common.explain(exc, self.url)}]")
            return
        printer.finish()
        self.progress.finished("done")
        if result.error is not None:
            self.say(f"[the run failed: {result.error}]")

    def command(self, line: str) -> bool:
        """Run a slash command; ``False`` ends the session."""
        from coder_proto import CoderAgentError, CoderApiError

        name = line.split()[0].lower()
        agent = self.agent
        try:
            if name in ("/quit", "/exit"):
                return False
            if name == "/help":
                for command, meaning in COMMANDS.items():
                    self.say(f"  {command:<11} {meaning}")
                self.say("  Ctrl-C      interrupt the running turn; Ctrl-D ends the session")
            elif name == "/reset":
                previous = agent.chat_id
                agent.reset_session()
                kept = f" (chat {previous} is kept)" if previous else ""
                self.say(f"[the next message starts a new chat{kept}]")
            elif name == "/interrupt":
                try:
                    outcome = agent.interrupt()
                except CoderApiError as exc:
                    if exc.status != 409:
                        raise
                    self.say(f"[chat {agent.chat_id} has no running turn to interrupt]")
                    return True
                if outcome.interrupted:
                    self.say(f"[interrupted chat {outcome.chat_id}]")
                else:
                    self.say("[no chat yet: nothing to interrupt]")
            elif name == "/archive":
                outcome = agent.archive()
                if outcome.archived:
                    agent.reset_session()
                    self.say(
                        f"[archived chat {outcome.chat_id}; the next message starts a new one]"
                    )
                else:
                    self.say("[no chat yet: nothing to archive]")
            else:
                self.say(f"[unknown command {name}; /help lists the commands]")
        except (CoderAgentError, TimeoutError) as exc:
            self.say(f"[{name} failed: {type(exc).__name__}: {exc}]")
        return True


def _read(prompt: str) -> str:
    return input(prompt)


def _step(chat: _Chat, interactive: bool, terminated: Any) -> bool:
    """Read one line and act on it; ``False`` ends the session."""
    try:
        line = _read("> " if interactive else "")
    except EOFError:
        if interactive:
            print(file=chat.out, flush=True)
        return False
    line = line.strip()
    if not line:
        return True
    if line.startswith("/"):
        return chat.command(line)
    chat.turn(line, terminated)
    return True


def run_chat(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``chat`` handler: exit 0 when the session ends (Ctrl-D, /quit), 2 for a usage
    error, 143 on SIGTERM."""
    from coder_proto import CoderAgentError, CoderNetworkError

    out = out or sys.stdout
    err = sys.stderr
    signals = common._Signals()
    agent: Any = None
    chat: _Chat | None = None
    code = common.EXIT_OK
    try:
        with signals.installed(), contextlib.ExitStack() as stack:
            agent, progress = _open(args, stack, err)
            chat = _Chat(agent, out, err, progress, getattr(args, "deployment_url", None))
            interactive = is_terminal(sys.stdin)
            if interactive:
                with contextlib.suppress(ImportError):
                    import readline  # noqa: F401  (line editing and history for input())
                chat.say(
                    "coder-agent chat: type a message; /help lists the commands, Ctrl-C "
                    "interrupts a turn, Ctrl-D ends the session"
                )
            while True:
                # Ctrl-C outside a turn (at the prompt, during a command, between the two)
                # discards what was going on; only SIGTERM ends the session.
                try:
                    if not _step(chat, interactive, lambda: signals.terminated):
                        break
                except KeyboardInterrupt:
                    if signals.terminated:
                        raise
                    print("^C", file=out, flush=True)
    except common.UsageError as exc:
        print(f"coder-agent chat: {exc}", file=err)
        return common.EXIT_USAGE
    except KeyboardInterrupt:
        code = common.EXIT_TERMINATED if signals.terminated else common.EXIT_INTERRUPTED
        word = (
            "terminated by SIGTERM; the run was stopped"
            if signals.terminated
            else "stopped by Ctrl-C"
        )
        print(f"coder-agent chat: {word}", file=err)
    except CoderNetworkError as exc:
        print(
            f"coder-agent chat: {common.explain(exc, getattr(args, 'deployment_url', None))}",
            file=err,
        )
        code = common.EXIT_NETWORK
    except CoderAgentError as exc:
        print(
            f"coder-agent chat: {common.explain(exc, getattr(args, 'deployment_url', None))}",
            file=err,
        )
        code = common.EXIT_FAILED
    if agent is not None:
        _print_end(agent, err, fake=args.fake)
        url = getattr(args, "deployment_url", None)
        if not args.fake and url is not None and agent.chat_id is not None:
            from . import history

            assert chat is not None  # made right after the agent
            history.append(
                chat_id=agent.chat_id,
                deployment=url,
                prompt=chat.first_prompt,
                last_seen_message_id=agent.last_seen_message_id,
                command="chat",
            )
    return code


def _open(
    args: argparse.Namespace, stack: contextlib.ExitStack, err: TextIO
) -> tuple[Any, Progress]:
    """The session's agent and its progress line, the agent closed (without archiving) when
    ``stack`` unwinds."""
    args.deployment_url = None
    if args.last_seen_message_id is not None and args.chat_id is None and not args.continue_chat:
        raise common.UsageError("--last-seen-message-id needs --chat-id (or --continue)")
    try:
        tools = load_tools(args.tools)
    except ToolsError as exc:
        raise common.UsageError(str(exc)) from None
    progress = Progress(err)
    client, organization_id = common._connect(args, stack, progress)
    agent = common._agent(args, stack, client, organization_id, progress, tools=tools)
    return agent, progress


def _print_end(agent: Any, err: TextIO, *, fake: bool) -> None:
    chat_id = agent.chat_id
    if chat_id is None:
        print("no chat was created", file=err, flush=True)
        return
    cursor = agent.last_seen_message_id
    print(f"chat_id={chat_id} last_seen_message_id={cursor}", file=err, flush=True)
    if fake:  # the in-process fake server, and its chats, end with the command
        return
    resume = f"--chat-id {chat_id}"
    if cursor is not None:
        resume += f" --last-seen-message-id {cursor}"
    print(f"continue with: coder-agent chat {resume}", file=err, flush=True)

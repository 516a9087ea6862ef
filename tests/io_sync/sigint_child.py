"""A program that gets Ctrl-C while a blocking ``generate`` (or stream) waits on a stuck run.

Run by ``test_sigint.py`` as a subprocess: it prints ``READY`` once the turn's stream is open,
waits for SIGINT, then prints one JSON line describing what the user saw (D22).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent
from coder_proto.fake import Say, Script, Wait


def main(mode: str) -> int:
    outcome: dict[str, Any] = {}
    with FakeCoderServer(chunk_delay=0.001, interrupt_delay=0.02) as server:
        server.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))
        parts: list[str] = []

        def on_event(event: Any) -> None:
            if event.type == "ws:open":
                print("READY", flush=True)

        agent = CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            on_transport_event=on_event,
        )
        started = time.monotonic()
        try:
            if mode == "stream":
                with agent.stream("stuck") as stream:
                    for delta in stream.text_stream:
                        parts.append(delta)
            else:
                agent.generate("stuck")
            outcome["raised"] = None
        except KeyboardInterrupt:
            outcome["raised"] = "KeyboardInterrupt"
        outcome["seconds"] = time.monotonic() - started
        outcome["parts"] = parts
        outcome["background_done"] = agent.client.driver.wait_background(5.0)
        deadline = time.monotonic() + 5.0
        while server.open_websockets and time.monotonic() < deadline:
            time.sleep(0.01)
        outcome["open_websockets"] = server.open_websockets
        time.sleep(0.2)
        outcome["interrupts"] = server.counters.requests["interrupt_chat"]
        outcome["after"] = agent.generate("are you there?").text
        agent.close()
        outcome["idle"] = server.wait_idle(5.0)
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "generate"))

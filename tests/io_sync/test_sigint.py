"""Ctrl-C on the blocking adapter (D22): a ``KeyboardInterrupt`` raised while a call waits is
the runtime's cancellation: the turn is cancelled (the run on the server interrupted once, in
the background), the stream socket closed, the exception propagates, and the agent works
again afterwards. While the main thread drives, Ctrl-C is deferred to blocking points, so it
never lands inside a machine's step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent
from coder_io_sync._driver import _SIGINT, sigint_deferred
from coder_proto.fake import Say, Script, Wait

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_sigint_to_a_process_stuck_in_a_call_interrupts_the_run_once(mode: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.io_sync.sigint_child", mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        time.sleep(0.3)  # the first words arrive; then the run is stuck
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["raised"] == "KeyboardInterrupt"
    assert outcome["seconds"] < 10
    if mode == "stream":
        assert outcome["parts"] == ["thinking"]
    assert outcome["background_done"] and outcome["interrupts"] == 1
    assert outcome["open_websockets"] == 0
    assert outcome["after"] == "You said: are you there?" and outcome["idle"]


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001, interrupt_delay=0.02) as fake:
        fake.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))
        yield fake


def test_sigint_in_process_cancels_generate_and_restores_the_handler(
    server: FakeCoderServer,
) -> None:
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    with CoderAgent(
        base_url=server.url, token=server.token, organization_id=server.organization_id
    ) as agent:
        killer = threading.Timer(0.4, lambda: signal.pthread_kill(main, signal.SIGINT))
        killer.start()
        with pytest.raises(KeyboardInterrupt):
            agent.generate("stuck")
        killer.join()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert agent.client.driver.open_connections == 0
        assert agent.client.driver.wait_background(5.0)
        assert server.counters.requests["interrupt_chat"] == 1
        assert agent.generate("are you there?").text == "You said: are you there?"
    assert server.wait_idle(5.0)


def test_a_deferred_ctrl_c_is_raised_at_the_next_blocking_point() -> None:
    with sigint_deferred():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        signal.raise_signal(signal.SIGINT)  # between steps: remembered, not raised
        with pytest.raises(KeyboardInterrupt), _SIGINT.blocking():
            pytest.fail("the blocking point must raise first")
        # While blocked, Ctrl-C raises at once.
        with pytest.raises(KeyboardInterrupt), _SIGINT.blocking():
            signal.raise_signal(signal.SIGINT)
            time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_still_pending_is_raised_when_the_call_ends() -> None:
    with pytest.raises(KeyboardInterrupt), sigint_deferred():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_programs_own_sigint_handler_is_left_alone() -> None:
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with sigint_deferred():
            assert signal.getsignal(signal.SIGINT) is mine
            with _SIGINT.blocking():
                signal.raise_signal(signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_other_threads_never_touch_signal_handling() -> None:
    handlers: list[object] = []

    def body() -> None:
        with sigint_deferred(), _SIGINT.blocking():
            handlers.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert handlers == [signal.default_int_handler]

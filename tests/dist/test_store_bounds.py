"""Every wait on another process is bounded: a real TCPStore whose server is stopped."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from dist.fakes import record
from trainpace.dist.exchange import BoundedStore, Exchange, tcp_store
from trainpace.dist.monitor import RankMonitor
from trainpace.dist.ranks import RankInfo
from trainpace.summary import Summary

SERVER = textwrap.dedent("""
    import datetime, sys, time
    from torch.distributed import TCPStore
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=60))
    print(store.port, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def store_server():
    """(port, stop) of a real TCPStore server in a process of its own; stop() SIGSTOPs it, as
    a suspended torchrun agent is: connections stay open, nothing is answered."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        yield port, lambda: os.kill(server.pid, signal.SIGSTOP)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def _within(fn, bound_s):
    """Run fn on a thread; its outcome, or 'hung' if it has not returned after bound_s."""
    out = []
    thread = threading.Thread(target=lambda: out.append(_outcome(fn)), daemon=True)
    thread.start()
    thread.join(bound_s)
    return out[0] if out else "hung"


def _outcome(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test looks at what came out
        return exc


@pytest.mark.slow
def test_a_stopped_store_server_times_out_each_call_then_fails_at_once(store_server):
    port, stop = store_server
    info = RankInfo(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port)
    exchange = Exchange(info, timeout_s=1.0)
    exchange.post(record(0, 1))  # connected, answered
    stop()
    first = _within(exchange.collect, 30)  # no answer comes
    assert isinstance(first, TimeoutError), first
    assert "did not answer (reading windows) within 1 s" in str(first)
    assert exchange.store.dead == str(first)
    again = _within(lambda: exchange.post(record(0, 2)), 30)
    assert isinstance(again, TimeoutError)
    assert str(again) == str(first)  # dead since: no second wait on the server


@pytest.mark.slow
def test_rank0_finishes_although_the_store_server_is_stopped(store_server):
    port, stop = store_server
    info = RankInfo(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port)
    monitor = RankMonitor(info, run_id="x", timeout_s=1.0)
    step = {"step": 1, "t_s": 1.0, "step_s": 0.1, "wait_s": 0.0, "samples": 1, "tokens": None}
    monitor.window({}, [step])
    assert monitor.broken is None
    stop()
    assert _within(lambda: monitor.finish(Summary()), 60) != "hung"
    assert "did not answer" in monitor.broken


def test_a_store_call_that_fails_fast_raises_its_own_error():
    def connect():
        raise ConnectionError("refused")

    store = BoundedStore(connect, 1.0)
    with pytest.raises(ConnectionError, match="refused"):
        store.get("k")
    assert store.dead is None


def test_the_real_store_answers_through_the_bound():
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    info = RankInfo(rank=0, world_size=1, master_addr="127.0.0.1", master_port=server.port)
    exchange = Exchange(info, timeout_s=5.0, connect=tcp_store)
    exchange.post(record(0, 1))
    assert [(r["rank"], r["window"]) for r in exchange.collect()] == [(0, 1)]

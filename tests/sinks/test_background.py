import threading

from trainpace.sinks.background import BackgroundWriter


def test_calls_run_in_order_off_the_calling_thread_and_close_drains():
    seen, threads = [], set()
    errors = []
    writer = BackgroundWriter(errors.append)
    for i in range(200):
        writer.submit(lambda i=i: (seen.append(i), threads.add(threading.current_thread().name)))
    writer.close()
    assert seen == list(range(200))
    assert threads == {"trainpace-writer"}
    assert errors == []
    assert writer.closed


def test_a_failing_call_is_reported_and_the_writer_goes_on():
    seen, errors = [], []
    writer = BackgroundWriter(errors.append)
    writer.submit(lambda: 1 / 0)
    writer.submit(seen.append, "after")
    writer.close()
    writer.close()  # idempotent
    assert seen == ["after"]
    assert [type(e) for e in errors] == [ZeroDivisionError]

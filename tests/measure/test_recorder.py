"""The hot-path recorder, driven by a manual clock: every expected figure is exact."""

import threading

import pytest
import torch

from trainpace.measure.recorder import StepRecorder
from trainpace.measure.steprow import records_of
from trainpace.records import STEP_FIELDS


def as_records(values):
    """Step records (dicts) from their values in the fields' order."""
    assert all(len(v) == len(STEP_FIELDS) for v in values)
    return [dict(zip(STEP_FIELDS, v, strict=True)) for v in values]


def take_records(rec, *, final=False):
    """The finished records, made at once (the Meter leaves that to its writer thread): on
    the host clock the steps as the writer takes them once the loop let the newest go, on a
    device clock those read back so far (every one with ``final``)."""
    if rec.timer is None:
        rec.close_newest()
        return as_records(records_of(rec.take_closed(), rec.t0, rec.metered))
    return as_records(rec.take_ready(final=final)())


def fetch(rec, clock, batch, wait_s):
    started = rec.fetch_started()
    clock.advance(wait_s)
    rec.fetch_done(started, batch)


def test_a_step_cycle_includes_the_wait_for_its_batch(clock):
    rec = StepRecorder(clock=clock)
    for _ in range(3):
        fetch(rec, clock, torch.zeros(4, 2), wait_s=0.02)
        rec.enter(1)
        clock.advance(0.08)
        rec.exit(None, failed=False)
    records = take_records(rec)
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert r["step_s"] == pytest.approx(0.10)
        assert r["wait_s"] == pytest.approx(0.02)
        assert r["samples"] == 4
        assert r["micro_batches"] == 1
    assert records[-1]["t_s"] == pytest.approx(0.30)


def test_gradient_accumulation_inside_one_step(clock):
    rec = StepRecorder(clock=clock)
    rec.enter(1)
    for _ in range(4):  # four micro-batches pulled from the loader inside the step
        fetch(rec, clock, torch.zeros(8, 2), wait_s=0.01)
        clock.advance(0.02)
    rec.exit(None, failed=False)
    (record,) = take_records(rec)
    assert record["samples"] == 32
    assert record["micro_batches"] == 4
    assert record["wait_s"] == pytest.approx(0.04)
    assert record["step_s"] == pytest.approx(0.12)


def test_accumulate_k_joins_k_step_blocks_into_one_optimizer_step(clock):
    rec = StepRecorder(clock=clock)
    closed = []
    for _ in range(6):
        rec.enter(3)
        clock.advance(0.01)
        closed.append(rec.exit(torch.zeros(5, 1), failed=False))  # no loader: the argument counts
    assert closed == [False, False, True, False, False, True]
    records = take_records(rec)
    assert [(r["step"], r["samples"], r["micro_batches"]) for r in records] == [(1, 15, 3), (2, 15, 3)]
    assert records[0]["step_s"] == pytest.approx(0.03)


def test_the_step_argument_is_not_counted_twice_when_the_loader_gave_the_batch(clock):
    rec = StepRecorder(clock=clock)
    batch = torch.zeros(6, 1)
    fetch(rec, clock, batch, 0.0)
    rec.enter(1)
    rec.exit(batch, failed=False)
    assert take_records(rec)[0]["samples"] == 6


def test_a_failed_step_is_not_a_step(clock):
    rec = StepRecorder(clock=clock)
    rec.enter(1)
    clock.advance(1.0)
    assert rec.exit(torch.zeros(2), failed=True) is False
    rec.enter(1)
    clock.advance(0.5)
    rec.exit(torch.zeros(2), failed=False)
    (record,) = take_records(rec)
    assert record["step"] == 1
    assert record["step_s"] == pytest.approx(0.5)  # the failed second is not in it


def test_observe_outside_a_step_belongs_to_the_step_just_closed(clock):
    rec = StepRecorder(clock=clock)
    rec.enter(1)
    rec.observe(loss=torch.tensor(2.0))
    rec.observe(loss=4.0)  # two micro-batch losses: their mean
    rec.exit(None, failed=False)
    rec.observe(metric=0.75)  # an eval after the step
    (record,) = take_records(rec)
    assert record["loss"] == pytest.approx(3.0)
    assert record["metric"] == pytest.approx(0.75)


def test_a_cpu_loss_is_read_at_once_whatever_its_kind(clock, recwarn):
    """A kept CPU tensor would hold its block of the heap for half a window, amid the memory
    the next steps' large tensors are carved from (see ``_keep``)."""
    rec = StepRecorder(clock=clock)
    weight = torch.tensor(3.0, requires_grad=True)
    rec.enter(1)
    rec.observe(loss=weight * 2.0)  # in the graph: read without a warning or a kept graph
    rec.observe(loss=torch.tensor(4))  # an integer tensor
    rec.observe(loss=torch.tensor([1.0, 3.0]))  # more than one element: their mean
    rec.observe(loss=1.5)  # a number
    kept = rec._cur.losses
    assert kept == [6.0, 4.0, 2.0, 1.5]
    assert all(type(value) is float for value in kept)
    rec.exit(None, failed=False)
    assert take_records(rec)[0]["loss"] == (6.0 + 4.0 + 2.0 + 1.5) / 4
    assert not recwarn.list


def test_a_cpu_loss_changed_in_place_after_observe_keeps_its_value_then(clock):
    rec = StepRecorder(clock=clock)
    running = torch.tensor(2.0)
    rec.enter(1)
    rec.observe(loss=running)
    rec.exit(None, failed=False)
    running.add_(1.0)  # the loop changes it before the writer takes the step
    assert take_records(rec)[0]["loss"] == 2.0


def test_token_counts_and_the_override(clock):
    rec = StepRecorder(clock=clock)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    fetch(rec, clock, {"input_ids": torch.zeros(2, 3), "attention_mask": mask}, 0.0)
    rec.enter(1)
    rec.exit(None, failed=False)
    assert take_records(rec)[0]["tokens"] == 5
    assert rec.tokens_counted == "non_padding"

    custom = StepRecorder(clock=clock, tokens=lambda b: 42, samples=lambda b: 7)
    fetch(custom, clock, "anything", 0.0)
    custom.enter(1)
    custom.exit(None, failed=False)
    record = take_records(custom)[0]
    assert (record["samples"], record["tokens"], custom.tokens_counted) == (7, 42, "custom")


def test_uncount_takes_a_batch_back_out_of_the_open_step_its_wait_stays(clock):
    rec = StepRecorder(clock=clock)
    peeked = {"input_ids": torch.zeros(3, 4), "attention_mask": torch.ones(3, 4)}
    fetch(rec, clock, peeked, 0.01)  # fetched, then left untrained
    rec.enter(1)
    rec.uncount(peeked)
    fetch(rec, clock, {"input_ids": torch.zeros(2, 3),
                       "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}, 0.02)
    rec.exit(None, failed=False)
    (record,) = take_records(rec)
    assert (record["samples"], record["tokens"], record["micro_batches"]) == (2, 5, 1)
    assert record["wait_s"] == pytest.approx(0.03)

    unknown = StepRecorder(clock=clock)
    fetch(unknown, clock, "text", 0.0)  # a batch that cannot be counted, then taken back
    unknown.enter(1)
    unknown.uncount("text")
    fetch(unknown, clock, torch.zeros(5, 2), 0.0)
    unknown.exit(None, failed=False)
    assert take_records(unknown)[0]["samples"] == 5


def test_a_failing_counter_does_not_lose_the_step(clock):
    def broken(batch):
        raise RuntimeError("boom")

    rec = StepRecorder(clock=clock, samples=broken)
    rec.enter(1)
    clock.advance(0.1)
    assert rec.exit(torch.zeros(3), failed=False) is True  # never raises into the loop
    where, error = rec.fault
    assert where == "counting a batch" and str(error) == "boom"
    (record,) = take_records(rec)
    assert record["step_s"] == pytest.approx(0.1)


def test_the_time_between_two_steps_is_the_next_steps(clock):
    """Without a metered loader nothing tells the loop's own work between steps from
    trainpace's: both belong to the next step's cycle, and the steps add up to the wall."""
    rec = StepRecorder(clock=clock)
    rec.enter(1)
    clock.advance(0.1)
    rec.exit(None, failed=False)
    clock.advance(0.003)  # work between the steps (the loop's, or trainpace's at a boundary)
    rec.enter(1)
    clock.advance(0.1)
    rec.exit(None, failed=False)
    records = take_records(rec)
    assert records[1]["step_s"] == pytest.approx(0.103)
    assert records[1]["t_s"] == pytest.approx(0.203) == sum(r["step_s"] for r in records)


class FakeDevice:
    """A device sharing the host's manual clock: it runs queued work in order.

    A marker's time is when the device reaches it (after the work queued before it);
    ready() is whether the host clock has passed that time; wait() blocks the host until then.
    """

    name = "cuda"

    def __init__(self, clock):
        self.clock = clock
        self.queue_end = clock.now

    def enqueue(self, seconds):
        self.queue_end = max(self.queue_end, self.clock.now) + seconds

    def mark(self):
        return {"t": max(self.queue_end, self.clock.now)}

    def ready(self, marker):
        return self.clock.now >= marker["t"]

    def elapsed_s(self, a, b):
        return b["t"] - a["t"]

    def wait(self, marker):
        self.clock.now = max(self.clock.now, marker["t"])

    def release(self, marker):
        pass


def test_device_step_time_comes_from_events_not_the_host(clock):
    dev = FakeDevice(clock)
    rec = StepRecorder(clock=clock, timer=dev)
    rec.touch()
    for _ in range(3):
        fetch(rec, clock, torch.zeros(4), wait_s=0.001)  # the host fetches fast...
        rec.enter(1)
        dev.enqueue(0.050)  # ...and queues 50 ms of device work in 1 ms
        clock.advance(0.001)
        rec.exit(None, failed=False)
    assert clock.now - 1000.0 == pytest.approx(0.006)
    assert take_records(rec) == []  # nothing finished on the device yet, and nothing blocked
    assert clock.now - 1000.0 == pytest.approx(0.006)
    clock.now = 1000.0 + 0.052  # the device has finished step 1 only
    records = take_records(rec)
    assert [r["step"] for r in records] == [1]
    records += take_records(rec, final=True)
    assert [r["step"] for r in records] == [1, 2, 3]
    # step 1 = 1 ms of waiting with the device idle + 50 ms of work; then 50 ms each
    assert [r["step_s"] for r in records] == pytest.approx([0.051, 0.050, 0.050])
    assert [r["exposed_wait_s"] for r in records] == pytest.approx([0.001, 0.0, 0.0])
    assert [r["wait_s"] for r in records] == pytest.approx([0.001] * 3)  # the host's view


def test_exposed_wait_is_the_device_idle_time_while_the_host_waits(clock):
    dev = FakeDevice(clock)
    rec = StepRecorder(clock=clock, timer=dev)
    rec.touch()
    for _ in range(2):
        fetch(rec, clock, torch.zeros(2), wait_s=0.030)  # a slow loader
        rec.enter(1)
        dev.enqueue(0.010)
        rec.exit(None, failed=False)
    records = take_records(rec, final=True)
    # step 2's fetch overlaps the last 10 ms of step 1's device work: 20 ms exposed
    assert [r["exposed_wait_s"] for r in records] == pytest.approx([0.030, 0.020])
    assert [r["step_s"] for r in records] == pytest.approx([0.040, 0.030])
    assert [r["wait_s"] for r in records] == pytest.approx([0.030, 0.030])


def test_fetch_times_and_counts_in_one_call_and_keeps_its_own_faults(clock):
    rec = StepRecorder(clock=clock, samples=lambda b: 1 / 0)

    def loader():
        for n in (4, 4):
            clock.advance(0.03)
            yield torch.zeros(n, 1)

    it = loader()
    for _ in range(2):
        batch = rec.fetch(it)
        assert batch.shape[0] == 4  # the batch comes back although counting it failed
        assert rec.fault is not None and rec.fault[0] == "counting a batch"
        rec.fault = None
        rec.enter(1)
        rec.exit(None, failed=False)
    with pytest.raises(StopIteration):
        rec.fetch(it)
    assert [r["wait_s"] for r in take_records(rec)] == pytest.approx([0.03, 0.03])


def test_tuple_batches_are_counted_from_their_first_tensor_whatever_the_layout(clock):
    rec = StepRecorder(clock=clock)
    batches = [
        (torch.zeros(8, 3), torch.zeros(8)),  # counted in full: the layout is learnt
        (torch.zeros(8, 3), torch.zeros(8)),  # the same layout: its first tensor's length
        (torch.zeros(5, 3), torch.zeros(5)),  # a short last batch
        [torch.zeros(()), torch.zeros(7, 2)],  # another layout: counted in full again
        (torch.zeros(()), torch.zeros(6)),  # the learnt layout, but a scalar first
        ["a", "b", "c"],  # raw samples
    ]
    it = iter(batches)
    for _ in batches:
        rec.fetch(it)
        rec.enter(1)
        rec.exit(None, failed=False)
    assert [r["samples"] for r in take_records(rec)] == [8, 8, 5, 7, 6, 3]
    assert rec.fault is None


def test_a_batch_that_cannot_be_counted_gives_unknown_samples_and_one_warning(caplog):
    from trainpace.measure.recorder import StepRecorder
    from trainpace.measure.summarize import figures
    from trainpace.series import StepSeries

    times = iter(float(i) for i in range(100))
    rec = StepRecorder(clock=lambda: next(times))
    batches = iter(["text a", "text b", "text c"])
    with caplog.at_level("WARNING", logger="trainpace"):
        for _ in range(3):
            rec.fetch(batches)
            rec.enter(1)
            rec.exit(None, False)
    records = take_records(rec, final=True)
    assert [r["samples"] for r in records] == [None, None, None]
    assert figures(StepSeries.from_records(records), 0)["samples_per_s"] is None
    warnings = [r.message for r in caplog.records if "samples=" in r.message]
    assert len(warnings) == 1 and "str" in warnings[0]


@pytest.mark.parametrize("kind", ["plain", "losses", "tokens", "metered", "uncounted"])
def test_the_rows_taken_become_records_of_the_one_schema(clock, kind):
    """The writer takes the rows as they are and makes their records, every field
    present."""
    rec = StepRecorder(clock=clock)
    for i in range(6):
        if kind == "metered":
            fetch(rec, clock, torch.zeros(4, 2), wait_s=0.01 * i)
        rec.enter(1)
        clock.advance(0.02 + 0.001 * i)
        if kind == "losses" and i % 2:
            rec.observe(loss=float("nan") if i == 3 else 1.0 / i)
        batch = {"input_ids": torch.ones(2, 3, dtype=torch.long)} if kind == "tokens" else (
            object() if kind == "uncounted" else torch.zeros(4, 2))
        rec.exit(batch, failed=False)
    rec.close_newest()
    rows = rec.take_closed()
    assert take_records(rec) == []  # taken: the rows left the recorder
    records = as_records(records_of(rows, rec.t0, rec.metered))
    assert [tuple(r) for r in records] == [STEP_FIELDS] * 6
    assert [r["step"] for r in records] == list(range(1, 7))
    assert [r["step_s"] for r in records] == pytest.approx(
        [0.02 + 0.001 * i + (0.01 * i if kind == "metered" else 0.0) for i in range(6)])
    if kind == "losses":
        assert [r["loss"] for r in records] == [None, 1.0, None, None, None, 0.2]
        assert [r["loss_nonfinite"] for r in records] == [None, False, None, True, None, False]
    if kind == "tokens":
        assert {r["tokens"] for r in records} == {6}
    if kind == "uncounted":
        assert {r["samples"] for r in records} == {None}
    assert {r["outside_s"] for r in records} == ({0.0} if kind == "metered" else {None})


def test_the_steps_are_the_first_threads_and_the_others_are_named():
    rec = StepRecorder()
    assert rec.from_other_thread() is False  # the first to ask is the one recorded
    answers = []
    other = threading.Thread(target=lambda: answers.append(rec.from_other_thread()),
                             name="learner-b")
    other.start()
    other.join()
    assert answers == [True]
    assert rec.from_other_thread() is False
    assert rec.step_thread_name == threading.current_thread().name
    assert list(rec.other_threads.values()) == ["learner-b"]

"""The job's diagnosis reads the steps of the rank that stands for the job (hand-made rank
folders and an in-memory store: exact figures)."""

import dataclasses
import json

import pytest

from dist.fakes import MemoryStore, record, write_rank
from trainpace.cli import main
from trainpace.diagnosis import diagnose
from trainpace.dist.folders import read_distributed
from trainpace.dist.job_summary import job_cost, merged_summary, summary_dict
from trainpace.dist.merge import Merger
from trainpace.dist.monitor import RankMonitor
from trainpace.dist.ranks import RankInfo
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import read_run
from trainpace.summary import Cost, Device, RankEntry, Summary, Throughput, Time

STEPS = 40


def synchronous_job():
    """Two ranks of a synchronous job: every 10th step stalls 0.3 s on both (the all-reduce
    holds rank 0 while rank 1 waits for its batch). Rank 1 waits 0.05 s a step for data;
    its first step is 0.02 s shorter, so rank 0 has the most measured seconds (5.2 against
    5.18: within 1%, they hold the job's time together)."""
    stall = [i % 10 == 0 for i in range(1, STEPS + 1)]
    step_s = [0.4 if s else 0.1 for s in stall]
    rank1_step_s = [0.08, *step_s[1:]]
    rank1_wait_s = [0.35 if s else 0.05 for s in stall]
    return step_s, rank1_step_s, rank1_wait_s


def findings(diagnosis):
    return {f.id: f for f in diagnosis.findings}


def test_the_rank_the_others_wait_for_stands_for_a_synchronous_job():
    m = Merger(3)
    m.add(record(0, 1, measured_s=1.000, wait_s=0.0))
    m.add(record(1, 1, measured_s=0.995, wait_s=0.4))  # 0.5% less time, waits most
    m.add(record(2, 1, measured_s=0.990, wait_s=0.1))
    assert m.slowest_rank() == 0  # the job's time (the throughput's denominator)
    assert m.steps_rank() == 1
    assert m.throughput()["samples_per_s"] == pytest.approx(480 / 1.0)
    # 2% behind is not the same time: the slowest stands for the job
    far = Merger(2)
    far.add(record(0, 1, measured_s=1.0))
    far.add(record(1, 1, measured_s=0.98, wait_s=0.4))
    assert far.steps_rank() == 0
    # with the comm hook, the time before the collective decides, not the data wait
    hook = Merger(2)
    hook.add(record(0, 1, measured_s=1.0, wait_s=0.0, pre_s=0.6))
    hook.add(record(1, 1, measured_s=1.0, wait_s=0.3, pre_s=0.2))
    assert hook.steps_rank() == 0


def test_the_report_diagnoses_the_waiting_ranks_steps_and_names_it(tmp_path):
    run = tmp_path / "run"
    step_s, rank1_step_s, rank1_wait_s = synchronous_job()
    write_rank(run, 0, step_s, [0.0] * STEPS, host="a", cpu_count=16, made_by="meter")
    write_rank(run, 1, rank1_step_s, rank1_wait_s, host="b", cpu_count=4, made_by="run",
               loader={"class": "DataLoader", "num_workers": 2})
    merged = read_distributed(run)
    assert merged is not None
    meta = merged.meta
    assert meta["dist"]["steps_rank"] == 1
    assert merged.series.column("wait_s").sum() == pytest.approx(sum(rank1_wait_s))
    # the throughput stays Σ samples over the most measured seconds (rank 0's 5.2 s)
    assert merged.summary.throughput.samples_per_s == pytest.approx(2 * STEPS * 4 / 5.2)
    assert merged.summary.time.measured_s == pytest.approx(sum(rank1_step_s))
    # the job's meta: rank 1's setup, each host's CPUs, the cores of rank 1's host
    assert (meta["made_by"], meta["loader"]["num_workers"], meta["cpu_count"]) == ("run", 2, 4)
    assert meta["hosts"] == [{"host": "a", "ranks": 1, "cpu_count": 16},
                             {"host": "b", "ranks": 1, "cpu_count": 4}]
    diagnosis = diagnose(merged.summary, steps=merged.series, system=merged.system, meta=meta)
    stall = findings(diagnosis)["periodic_stall"]
    # on rank 1's steps the stalls are in its data wait; rank 0's would not have shown it
    assert stall.evidence["cause"] == "data_wait"
    assert stall.evidence["in_data_wait_pct"] == pytest.approx(100.0)
    assert stall.evidence["steps_rank"] == 1
    assert stall.title.endswith("(on rank 1's steps)")
    # what rank 0's steps said: the same stalls, outside its loader, cause not told
    on_rank0 = diagnose(merged.summary, steps=_records(step_s, [0.0] * STEPS),
                        meta={**meta, "dist": {**meta["dist"], "steps_rank": 0}})
    assert findings(on_rank0)["periodic_stall"].evidence["cause"] == "unknown"


def test_rank_0_diagnoses_the_job_on_the_waiting_ranks_steps_live(tmp_path):
    store = MemoryStore()
    step_s, rank1_step_s, rank1_wait_s = synchronous_job()
    m0 = RankMonitor(RankInfo(rank=0, world_size=2, host="a"), run_id="job", timeout_s=1.0,
                     connect=lambda i, t: store, cpu_count=16)
    m1 = RankMonitor(RankInfo(rank=1, world_size=2, host="b"), run_id="job", timeout_s=1.0,
                     connect=lambda i, t: store, cpu_count=4)
    m0.run_folder(tmp_path / "run", lambda p: p)
    m1.run_folder(tmp_path / "run", lambda p: p)
    write_rank(tmp_path / "run", 1, rank1_step_s, rank1_wait_s, host="b", cpu_count=4,
               made_by="run")
    rows = {0: _records(step_s, [0.0] * STEPS), 1: _records(rank1_step_s, rank1_wait_s)}
    for window in range(4):  # windows of 10 steps, as every rank's Meter posts them
        for rank, monitor in ((1, m1), (0, m0)):
            monitor.window({"warmup_steps": 0}, rows[rank][10 * window:10 * (window + 1)])
    m1.finish(Summary())
    seen = {}

    def diagnose_job(summary, meta, steps):
        seen.update(meta=meta, steps=steps)
        return summary

    merged = m0.finish(Summary(run_id="job"), diagnose=diagnose_job)
    assert merged is not None
    steps, meta = seen["steps"], seen["meta"]
    assert steps.rank == 1 and meta["dist"]["steps_rank"] == 1
    assert list(steps.series.column("wait_s")) == pytest.approx(rank1_wait_s)
    assert (meta["cpu_count"], meta["made_by"]) == (4, "run")
    assert meta["hosts"] == [{"host": "a", "ranks": 1, "cpu_count": 16},
                             {"host": "b", "ranks": 1, "cpu_count": 4}]
    assert merged.time.step_s_median == pytest.approx(0.1)  # rank 1's own steps
    assert merged.time.measured_s == pytest.approx(sum(rank1_step_s))


def _records(step_s, wait_s):
    t, out = 0.0, []
    for i, (s, w) in enumerate(zip(step_s, wait_s, strict=True), start=1):
        t += s
        out.append({"step": i, "t_s": t, "step_s": s, "wait_s": w, "samples": 4,
                    "tokens": None})
    return out


def test_mid_run_rank_entries_never_show_a_median_of_window_medians():
    # rank 1's windows: medians 0.1, 0.3 and 0.5 (median 0.3); its steps' median is not
    # known from them, so its ranks[] entry says None and carries the window figure by name
    m = Merger(2)
    for window, median_s in enumerate((0.1, 0.3, 0.5), start=1):
        m.add(record(0, window, measured_s=1.0))
        m.add(record(1, window, measured_s=10 * median_s))
    slowest = Summary(run_id="r1", time=Time(step_s_median=0.5, measured_s=9.0))
    mid = merged_summary(m, Summary(run_id="job"), done=False, rank_summaries={1: slowest})
    assert [e.step_s_median for e in mid.ranks] == [None, 0.5]  # rank 1's steps were read
    data = summary_dict(mid, m, done=False)
    assert [e["window_step_s_median"] for e in data["ranks"]] == [pytest.approx(0.1),
                                                                   pytest.approx(0.3)]


def cost_job(kind, hosts, power_w):
    """A merged 2-rank job at 1000 samples/s over 10 s, and each rank's own summary (a
    measured power each)."""
    merged = Summary(run_id="job", world_size=2, device=Device(kind=kind),
                     throughput=Throughput(samples_per_s=1000.0), time=Time(measured_s=10.0),
                     ranks=[RankEntry(rank=r, host=h) for r, h in enumerate(hosts)])
    own = Cost(price_per_hour=3.6, power_w_mean=power_w, energy_source="rapl", devices=1)
    ranks = {r: Summary(cost=own) for r in range(2)}
    states = [{"rank": r, "host": h} for r, h in enumerate(hosts)]
    return merged, own, ranks, states


def test_a_cpu_jobs_cost_is_per_host_and_a_gpu_jobs_per_device():
    # two CPU processes on one host: one host's price, its package's power once
    cost = job_cost(*cost_job("cpu", ["a", "a"], 100.0))
    assert (cost.devices, cost.power_w_mean) == (1, 100.0)
    assert cost.usd_per_million_samples == pytest.approx(3.6 / 3600 / 1000 * 1e6)
    assert cost.energy_j == pytest.approx(100.0 * 10.0)
    # on two hosts: two
    assert job_cost(*cost_job("cpu", ["a", "b"], 100.0)).power_w_mean == 200.0
    # two GPUs on one host: each device priced and its power counted
    gpus = job_cost(*cost_job("cuda", ["a", "a"], 300.0))
    assert (gpus.devices, gpus.power_w_mean) == (2, 600.0)
    assert gpus.usd_per_million_samples == pytest.approx(2 * 3.6 / 3600 / 1000 * 1e6)
    # a rank's power not at hand (another node's folder): no energy figure, said why
    merged, own, ranks, states = cost_job("cuda", ["a", "b"], 300.0)
    blind = job_cost(merged, own, {0: ranks[0]}, states)
    assert blind.power_w_mean is None and "another node" in blind.energy_missing


def test_a_two_level_jobs_end_reads_the_step_medians_of_rank_0s_node(tmp_path):
    store = MemoryStore()
    mons = [RankMonitor(RankInfo(rank=r, world_size=4, local_rank=r % 2, local_world_size=2,
                                 node=r // 2, host=f"h{r // 2}"), run_id="job", timeout_s=1.0,
                        connect=lambda i, t: store, flat_max_ranks=2) for r in range(4)]
    for monitor in mons:
        monitor.run_folder(tmp_path / "run", lambda p: p)
    # rank 1's folder is on rank 0's node; ranks 2 and 3 wrote theirs on node 1
    rank1_step_s = [0.1, 0.1, 0.1, 0.4]
    write_rank(tmp_path / "run", 1, rank1_step_s, [0.0] * 4, world=4)
    for r in (3, 1, 2, 0):
        mons[r].window({"warmup_steps": 0}, _records(rank1_step_s, [0.0] * 4))
    for r in (3, 1, 2):
        mons[r].finish(Summary())
    merged = mons[0].finish(Summary(run_id="job", time=Time(step_s_median=0.25)))
    assert merged is not None
    assert [e.step_s_median for e in merged.ranks] == [0.25, pytest.approx(0.1), None, None]


def _cpu_rank_with_power(folder, power_w):
    """A CPU rank's sampler rows of its host's RAPL package (``power_w`` over 0–1 s) and its
    summary.json (the device it ran on)."""
    rows = [{"t_s": t, "rapl": {"package-0": [int(power_w * t * 1e6), 2**40]}}
            for t in (0.0, 0.5, 1.0)]
    (folder / "system.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = summary_for_run(read_run(folder))
    summary = dataclasses.replace(summary, device=Device(kind="cpu"))
    (folder / "summary.json").write_text(json.dumps(summary.to_dict()))


@pytest.mark.parametrize(("hosts", "power_w"), [(("a", "b"), 50.0 + 70.0), (("h", "h"), 70.0)])
def test_report_of_a_job_prices_every_ranks_measured_power(tmp_path, capsys, hosts, power_w):
    # each host's package once: two hosts add up, two ranks of one host read the same package
    run = tmp_path / "run"
    for rank, (host, watts) in enumerate(zip(hosts, (50.0, 70.0), strict=True)):
        write_rank(run, rank, [0.1] * 10, [0.0] * 10, host=host)
        _cpu_rank_with_power(run / f"rank{rank}", watts)
    assert read_distributed(run).energy.power_w_mean == pytest.approx(power_w)
    assert main(["report", str(run), "--json", "--price-per-hour", "3.6"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert cost["power_w_mean"] == pytest.approx(power_w)
    assert cost["devices"] == len(set(hosts))


def test_report_of_a_job_with_a_rank_without_readings_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    for rank in (0, 1):
        write_rank(run, rank, [0.1] * 10, [0.0] * 10, host=f"h{rank}")
    _cpu_rank_with_power(run / "rank0", 50.0)
    energy = read_distributed(run).energy
    assert energy.power_w_mean is None and energy.missing.startswith("rank 1: ")

"""One naming for every sink: the job's tags, and each rank's under ``trainpace/rank{r}/``."""

from trainpace.sinks.console_line import format_window
from trainpace.sinks.names import prometheus_name, rank_tag, split_rank, window_scalars


def test_rank_tags_and_back():
    assert rank_tag("trainpace/throughput/samples_per_s", 1) == (
        "trainpace/rank1/throughput/samples_per_s")
    assert split_rank("trainpace/rank12/data/wait_pct") == ("trainpace/data/wait_pct", 12)
    assert split_rank("trainpace/data/wait_pct") == ("trainpace/data/wait_pct", None)
    assert split_rank("trainpace/job/ranks_reporting") == ("trainpace/job/ranks_reporting", None)
    assert split_rank("trainpace/rankx/data/wait_pct") == ("trainpace/rankx/data/wait_pct", None)
    assert prometheus_name("trainpace/job/ranks_reporting") == "trainpace_job_ranks_reporting"


def test_a_job_window_has_the_jobs_tags_and_each_ranks_under_its_rank():
    window = {"samples_per_s": 600.0, "step_s_median": 0.02, "ranks": 2, "world_size": 2,
              "rank_figures": {0: {"samples_per_s": 800.0, "wait_pct": None},
                               1: {"samples_per_s": 200.0, "step_s_median": 0.02}}}
    assert window_scalars(window) == {
        "trainpace/throughput/samples_per_s": 600.0,
        "trainpace/time/step_median_ms": 20.0,
        "trainpace/job/ranks_reporting": 2.0,
        "trainpace/rank0/throughput/samples_per_s": 800.0,
        "trainpace/rank1/throughput/samples_per_s": 200.0,
        "trainpace/rank1/time/step_median_ms": 20.0,
    }


def test_the_console_line_says_it_is_the_jobs():
    window = {"last_step": 300, "measured_steps": 100, "samples_per_s": 9004.0,
              "ranks": 2, "world_size": 2, "wait_pct": 12.5}
    assert format_window(window) == "job, 2 ranks | step 300 | 9,004 samples/s | data wait 12.5%"
    window["ranks"] = 1
    assert format_window(window).startswith("job, 1 of 2 ranks | step 300 | ")
    del window["ranks"]  # a single process: no label
    assert format_window(window).startswith("step 300 | 9,004 samples/s")


def test_a_ranks_own_line_is_labelled_and_does_not_show_the_job():
    import io

    from trainpace.runlog import Record
    from trainpace.sinks.console_line import ConsoleSink

    stream = io.StringIO()
    sink = ConsoleSink(stream, own_rank=1)
    sink.log(Record("window", {"window": {"last_step": 5, "measured_steps": 5,
                                          "samples_per_s": 40.0}, "steps": []}, 5))
    assert stream.getvalue() == "rank 1 | step 5 | 40 samples/s\n"
    assert (sink.shows_job, ConsoleSink(stream).shows_job) == (False, True)

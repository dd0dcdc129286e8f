"""The console report, rendered into a string with a fixed width and no colours."""

import dataclasses
import io

from trainpace.diagnosis import diagnose
from trainpace.report._signs import num, pct, signs
from trainpace.report.console import print_report
from trainpace.summary import Data, Device, Flops, Steps, Summary, Throughput


def render(summary, width=120, **kw):
    out = io.StringIO()
    print_report(summary, file=out, width=width, **kw)
    return out.getvalue()


def test_report_shows_the_five_signs_the_bottleneck_and_the_findings(run):
    text = render(run.summary)
    for sign in ("throughput", "training time", "device utilization", "memory bandwidth", "data loading"):
        assert sign in text
    assert "bottleneck: data loading — The step waits for data 30% of the time" in text
    assert " CRITICAL  The step waits for data 30% of the time" in text
    assert "→ data wait is 30% of the step with `num_workers=0`" in text
    assert "320 samples/s" in text
    assert "wait 30% of step" in text
    assert "\x1b[" not in text  # not a terminal: no colour codes


def test_findings_are_listed_worst_first(run):
    text = render(run.summary)
    assert text.index(" CRITICAL ") < text.index(" WARNING ")


def test_nulls_are_dashes_with_the_missing_source_never_zero():
    text = render(Summary(run_id="r"), width=160)
    assert "not measured: no bandwidth source (NVML/DCGM) and no byte count" in text
    assert signs(Summary(run_id="r"))[4].details[0] == (
        "not measured: no batch wait timed (a loop wraps its loader in meter.loader(...); "
        "trainpace run times the torch DataLoaders a script iterates)")
    assert " 0 samples/s" not in text and "0%" not in text
    assert "not diagnosed yet" in text


def test_a_healthy_run_says_none_and_what_was_checked():
    s = Summary(run_id="ok", steps=Steps(total=60, warmup=10, measured=50),
                data=Data(wait_pct=1.0, wait_s_per_step=0.001),
                device=Device(kind="cpu", util_pct=80.0), flops=Flops())
    s = dataclasses.replace(s, diagnosis=diagnose(s))
    text = render(s, width=160)
    assert "bottleneck: none — No bottleneck found in what was measured" in text
    assert "✓ data loading: data wait 1.0% of the step (< 10%)" in text
    assert "? thermal: no temperature or throttle reading for the cpu" in text


def test_a_run_with_no_timed_step_says_nothing_was_measured():
    s = Summary(run_id="empty")
    s = dataclasses.replace(s, diagnosis=diagnose(s))
    text = render(s, width=160)
    assert ("bottleneck: not measured — Nothing was measured: no step was timed, so no "
            "bottleneck can be named") in text
    assert "No bottleneck found" not in text


def test_colours_when_asked():
    s = Summary(run_id="r", throughput=Throughput(samples_per_s=5.0))
    assert "\x1b[" in render(s, color=True)


def test_default_stream_is_stderr(capsys, run):
    print_report(run.summary)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "bottleneck: data loading" in captured.err


def test_sign_formatting():
    assert num(1234.5, "samples/s") == "1,234 samples/s"  # no decimals once past three digits
    assert num(0.1234, "TFLOP/s") == "0.123 TFLOP/s"
    assert num(None, "GB/s") == "—"
    assert (pct(None), pct(5.25), pct(38.4)) == ("—", "5.2%", "38%")
    device = signs(Summary(device=Device(kind="cuda", name="H100", util_pct=71.0)))[2]
    assert (device.value, device.details[0], device.status) == ("busy 71%", "cuda (H100)", "ok")


def test_the_table_says_bandwidth_bound_only_where_the_diagnosis_does():
    from trainpace.summary import Bandwidth

    # below the ridge, moving 7.4% of the peak: the diagnosis says not bandwidth-bound
    s = Summary(flops=Flops(roofline="bandwidth_bound", intensity_flop_per_byte=3.0,
                            ridge_flop_per_byte=6.0),
                bandwidth=Bandwidth(util_pct=7.4, achieved_gb_s=3.5, peak_gb_s=47.8,
                                    source="estimate"))
    s = dataclasses.replace(s, diagnosis=diagnose(s))
    assert all(f.id != "bandwidth_bound" for f in s.diagnosis.findings)
    assert "roofline below the ridge, not bandwidth-bound" in " ".join(signs(s)[3].details)
    # at 80% of the peak it is, in the findings and in the table alike
    s = dataclasses.replace(s, bandwidth=dataclasses.replace(s.bandwidth, util_pct=80.0))
    s = dataclasses.replace(s, diagnosis=diagnose(s))
    assert any(f.id == "bandwidth_bound" for f in s.diagnosis.findings)
    assert "roofline bandwidth_bound" in " ".join(signs(s)[3].details)


def test_the_headline_labels_the_whole_measured_run_and_the_steady_span():
    s = Summary(run_id="shared", steps=Steps(total=303, warmup=3, measured=300,
                                             slowed_by_others=100),
                throughput=Throughput(samples_per_s=333.3, steps_per_s=33.3,
                                      steady_samples_per_s=500.0))
    details = signs(s)[0].details
    assert signs(s)[0].value == "333 samples/s"
    assert "whole measured run: 300 steps (3 warm-up excluded)" in details
    assert ("steady span: 500 samples/s over 200 steps, without the 100 steps other "
            "processes slowed") in details
    quiet = dataclasses.replace(s, steps=dataclasses.replace(s.steps, slowed_by_others=0))
    assert not any(d.startswith("steady span") for d in signs(quiet)[0].details)

"""The MLflow sink against MLflow's own default store (sqlite, what the [mlflow] extra
installs), read back with ``MlflowClient``."""

import logging

import pytest
import torch

import trainpace

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy", reason="the [mlflow] extra's sqlite store")
pytest.importorskip("alembic", reason="the [mlflow] extra's sqlite store")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::FutureWarning")


@pytest.fixture
def store(tmp_path, monkeypatch):
    # MLflow 3 refuses its file store (kept for existing users only): a sqlite database,
    # MLflow's own default, as on a fresh machine
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # the artifacts go to ./mlruns
    yield uri
    while mlflow.active_run() is not None:
        mlflow.end_run()


def metered_run(clock, **kwargs) -> trainpace.Summary:
    meter = trainpace.Meter(window=10, clock=clock, console=False, report=False,
                            count_flops=False, warmup=0, **kwargs)
    for batch in meter.loader([torch.zeros(8, 2)] * 30):
        with meter.step(batch):
            clock.advance(0.02)
            meter.observe(loss=1.5)
    return meter.finish()


def history(client, run_id, key):
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_a_run_is_started_with_params_window_metrics_and_the_summary(store, clock):
    summary = metered_run(clock, mlflow=store, run_id="ml-test")
    client = MlflowClient(store)
    (run,) = client.search_runs(["0"])
    assert run.info.run_name == "ml-test"
    assert run.info.status == "FINISHED"  # the sink started it, so it ended it
    points = history(client, run.info.run_id, "trainpace/throughput/samples_per_s")
    # one point per window, then the run's figure at its last step
    assert [step for step, _ in points] == [10, 20, 30, 30]
    assert [value for _, value in points] == pytest.approx([400.0] * 4)
    assert [v for _, v in history(client, run.info.run_id, "trainpace/time/step_median_ms")] == \
        pytest.approx([20.0] * 4)
    assert history(client, run.info.run_id, "trainpace/throughput/tokens_per_s") == []  # not measured
    assert run.data.metrics["trainpace/time/wall_s"] == pytest.approx(0.6)
    params = run.data.params
    assert params["config.window"] == "10"
    assert params["device.kind"] == "cpu"
    assert params["versions.torch"] == torch.__version__
    assert run.data.tags["trainpace/diagnosis/bottleneck"] == summary.diagnosis.bottleneck
    stored = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/trainpace/summary.json")
    assert stored["throughput"]["samples_per_s"] == pytest.approx(400.0)


def test_logs_into_the_active_run_and_leaves_it_open(store, clock):
    with mlflow.start_run() as active:
        mlflow.log_param("lr", 0.1)
        metered_run(clock, mlflow=True)
        assert mlflow.active_run().info.run_id == active.info.run_id
    client = MlflowClient(store)
    assert len(client.search_runs(["0"])) == 1
    run = client.get_run(active.info.run_id)
    assert run.data.params["lr"] == "0.1" and run.data.params["config.window"] == "10"
    assert [s for s, _ in history(client, active.info.run_id, "trainpace/loss/window_mean")] == [10, 20, 30]


def test_a_dead_server_is_dropped_with_one_warning_and_training_goes_on(clock, caplog,
                                                                         monkeypatch):
    # Nothing listens on port 9 of the loopback: the first request fails at once.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        summary = metered_run(clock, mlflow="http://127.0.0.1:9")
    assert summary.steps.total == 30
    warnings = [r for r in caplog.records if "MLflow" in r.getMessage()]
    assert len(warnings) == 1 and "dropped" in warnings[0].getMessage()


def test_a_bad_value_is_a_config_error():
    with pytest.raises(trainpace.ConfigError, match="mlflow must be True or a tracking URI"):
        trainpace.Meter(mlflow=3, console=False)

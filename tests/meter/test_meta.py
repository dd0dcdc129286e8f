"""meta.json's argv: credentials in the script's arguments are not stored."""

from trainpace.job.process import REDACTED, redacted_argv


def test_values_of_arguments_named_for_credentials_are_redacted():
    argv = ["train.py", "--api-key", "SECRET1", "--hf_token=SECRET2", "--lr", "0.1",
            "db.password=SECRET3", "--secret-key", "--", "--wandb-key", "SECRET4", "-x"]
    assert redacted_argv(argv) == [
        "train.py", "--api-key", REDACTED, f"--hf_token={REDACTED}", "--lr", "0.1",
        f"db.password={REDACTED}", "--secret-key", "--", "--wandb-key", REDACTED, "-x"]


def test_arguments_that_only_resemble_credential_names_keep_their_values():
    argv = ["train.py", "--max-tokens", "512", "--tokenizer=gpt2", "--keyframes", "4",
            "--monkey", "1"]
    assert redacted_argv(argv) == argv


def test_made_by_is_written_as_the_front_end_says(tmp_path):
    import json

    import pytest

    from trainpace import Meter
    from trainpace.errors import ConfigError

    for made_by, folder in ((None, "own"), ("run", "by-run")):
        options = {} if made_by is None else {"made_by": made_by}
        meter = Meter(tmp_path / folder, console=False, report=False, **options)
        meter.finish()
        meta = json.loads((tmp_path / folder / "meta.json").read_text())
        assert meta["made_by"] == (made_by or "meter")
    with pytest.raises(ConfigError, match="made_by"):
        Meter(None, made_by="jupyter")


def test_the_demo_says_it_made_its_run(tmp_path):
    import json

    from trainpace.demo import DemoSettings, run_demo

    _, folder = run_demo(DemoSettings(steps=2), out=tmp_path / "demo", console=False,
                         report=False, count_flops=False)
    assert json.loads((folder / "meta.json").read_text())["made_by"] == "demo"

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

"""The CLI's pure parts: request building, durations, tables, config files, error messages."""

import json
import os
import stat

import click
import httpx
import pytest
from gpuportal import config
from gpuportal.cli import build_job_request, gpus_total
from gpuportal.client import error_message, exit_code_for
from gpuportal.durations import parse_minutes, parse_seconds
from gpuportal.errors import EXIT_AUTH, EXIT_NOT_FOUND, EXIT_SERVER, EXIT_USAGE, CliError
from gpuportal.output import table

FLAGS = dict.fromkeys(
    ["name", "gpus", "mig", "gang", "backend", "pool", "priority", "cpu", "memory", "max_runtime"]
)


def request(**overrides):
    return build_job_request(
        **{**FLAGS, "project": "vision", "image": "busybox", "env": (), "command": (), **overrides}
    )


def test_single_gpu_job_by_default():
    assert request(command=("python", "train.py")) == {
        "project": "vision",
        "image": "busybox",
        "kind": "single",
        "gpus": 1,
        "command": ["python", "train.py"],
    }


def test_mig_gang_and_the_optional_fields():
    assert request(mig="1g.10gb")["kind"] == "mig"
    assert request(mig="1g.10gb")["mig_profile"] == "1g.10gb"
    gang = request(gang=4, gpus=2, backend="volcano", env=("A=1", "B=x=y"), max_runtime="1h30m")
    assert gang["kind"] == "gang"
    assert (gang["replicas"], gang["gpus"], gang["backend"]) == (4, 2, "volcano")
    assert gang["env"] == {"A": "1", "B": "x=y"}
    assert gang["max_runtime_minutes"] == 90
    assert request(gang=2)["gpus"] == 8
    fraction = request(gpu_fraction=0.5)
    assert (fraction["kind"], fraction["gpu_fraction"], "gpus" in fraction) == (
        "single",
        0.5,
        False,
    )
    assert request(gpu_memory=20000)["gpu_memory"] == 20000
    dra = request(pool="dra", device=("min_memory=40Gi", "architecture = Hopper"))
    assert dra["device"] == {"min_memory": "40Gi", "architecture": "Hopper"}
    assert (dra["kind"], dra["gpus"], dra["pool"]) == ("single", 1, "dra")
    assert "device" not in request()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mig": "1g.10gb", "gang": 2}, "--mig and --gang"),
        ({"mig": "1g.10gb", "gpus": 2}, "leave out --gpus"),
        ({"gpu_fraction": 0.5, "gpus": 1}, "part of one GPU"),
        ({"env": ("NOVALUE",)}, "is not KEY=VALUE"),
        ({"device": ("min_memory",)}, "is not KEY=VALUE"),
        ({"device": ("min_memory=",)}, "is not KEY=VALUE"),
        ({"max_runtime": "soon"}, "not a duration"),
    ],
)
def test_contradictory_or_malformed_flags_are_usage_errors(overrides, message):
    with pytest.raises(click.UsageError, match=message):
        request(**overrides)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("15", 900)],
)
def test_durations(text, seconds):
    assert parse_seconds(text) == seconds


def test_minutes_round_up_and_refuse_zero():
    assert parse_minutes("61s") == 2
    with pytest.raises(ValueError, match="longer than zero"):
        parse_minutes("0m")
    with pytest.raises(ValueError, match="not a duration"):
        parse_seconds("2 hours")


def test_gpus_total_counts_every_pod():
    assert gpus_total({"replicas": 2, "gpus": 8}) == "2 × 8"
    assert gpus_total({"replicas": 1, "gpus": 4}) == "4"
    assert gpus_total({"mig_profile": "1g.10gb", "gpus": None}) == "1 × 1g.10gb"


def test_table_aligns_columns_and_shows_missing_values():
    text = table(["id", "name"], [[1, "short"], [22, None]])
    assert text.splitlines() == ["ID  NAME", "1   short", "22  -"]


def test_api_errors_keep_the_portals_words():
    response = httpx.Response(
        400,
        json={
            "detail": "gpus: needs 16, may never use more than 8.",
            "errors": {"gpus": ["needs 16, may never use more than 8."], "pool": ["No pool 'x'."]},
        },
    )
    assert error_message(response) == (
        "gpus: needs 16, may never use more than 8.; pool: No pool 'x'."
    )
    assert error_message(httpx.Response(502, text="<html>Bad gateway</html>")).startswith(
        "HTTP 502"
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, EXIT_USAGE),
        (409, EXIT_USAGE),
        (401, EXIT_AUTH),
        (403, EXIT_AUTH),
        (404, EXIT_NOT_FOUND),
        (500, EXIT_SERVER),
        (503, EXIT_SERVER),
    ],
)
def test_exit_codes_by_status(status, code):
    assert exit_code_for(status) == code


def test_login_file_is_private_and_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUPORTAL_URL", raising=False)
    monkeypatch.delenv("GPUPORTAL_TOKEN", raising=False)
    with pytest.raises(CliError) as missing:
        config.load_settings()
    assert missing.value.exit_code == EXIT_AUTH

    path = config.save_settings("portal.example.org/", "secret-token")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "url": "https://portal.example.org",
        "token": "secret-token",
    }
    assert config.load_settings() == config.Settings("https://portal.example.org", "secret-token")

    monkeypatch.setenv("GPUPORTAL_TOKEN", "from-env")
    assert config.load_settings().token == "from-env"
    assert config.forget_settings() is True
    with pytest.raises(CliError):  # the token alone is not enough: no URL any more
        config.load_settings()


def test_a_template_sends_only_the_flags_given():
    assert request(image=None, template="nightly") == {"project": "vision", "template": "nightly"}
    assert request(image=None, template="nightly", gpus=2, command=("python", "x.py")) == {
        "project": "vision",
        "template": "nightly",
        "gpus": 2,
        "command": ["python", "x.py"],
    }


def test_an_image_or_a_template_is_needed():
    with pytest.raises(click.UsageError, match="--template"):
        request(image=None)


# --- issue 12's flags -------------------------------------------------------------------------


def test_mount_shm_grace_resume_and_credentials_map_to_the_api_fields():
    body = request(
        mount=("imagenet", "scratch:/scratch", "models:ro", "ckpt:/ckpt:rw"),
        shm_size="8Gi",
        grace=120,
        resume_from=42,
        env=("EPOCHS=3",),
        secret_env=("HF_TOKEN=hf/token",),
        secret_file=("gcp:/var/run/gcp",),
    )
    assert body["mounts"] == [
        {"volume": "imagenet"},
        {"volume": "scratch", "path": "/scratch"},
        {"volume": "models", "read_only": True},
        {"volume": "ckpt", "path": "/ckpt", "read_only": False},
    ]
    assert (body["shm_size"], body["termination_grace_seconds"], body["resume_from"]) == (
        "8Gi",
        120,
        42,
    )
    assert body["env"] == {"EPOCHS": "3", "HF_TOKEN": {"secret": "hf", "key": "token"}}
    assert body["secret_files"] == [{"secret": "gcp", "path": "/var/run/gcp"}]
    # Flags left out send nothing: the portal's defaults (and a template's fields) apply.
    assert set(request()) == {"project", "image", "kind", "gpus"}


def test_array_and_sweep_with_parallelism():
    assert request(array=10, parallelism=3)["array"] == {"count": 10, "parallelism": 3}
    assert request(array=4)["array"] == {"count": 4}
    sweep = request(sweep=("lr=0.1,1e-3", "opt=adam,sgd", "batch=32,64"), parallelism=2)
    assert sweep["sweep"] == {"lr": [0.1, 0.001], "opt": ["adam", "sgd"], "batch": [32, 64]}
    assert sweep["parallelism"] == 2
    assert "array" not in sweep


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mount": ("imagenet:/data:ro:x",)}, "is not VOLUME"),
        ({"mount": (":/data",)}, "is not VOLUME"),
        ({"secret_env": ("HF_TOKEN=hf",)}, "is not NAME=CREDENTIAL/KEY"),
        ({"env": ("HF_TOKEN=x",), "secret_env": ("HF_TOKEN=hf/token",)}, "given both"),
        ({"secret_file": ("/var/run/gcp",)}, "is not CREDENTIAL:PATH"),
        ({"sweep": ("lr",)}, "is not NAME=V1,V2"),
        ({"sweep": ("lr=0.1,",)}, "is not NAME=V1,V2"),
        ({"array": 2, "sweep": ("lr=1,2",)}, "do not go together"),
        ({"parallelism": 2}, "goes with --array or --sweep"),
    ],
)
def test_malformed_issue_12_flags_are_usage_errors(overrides, message):
    with pytest.raises(click.UsageError, match=message):
        request(**overrides)

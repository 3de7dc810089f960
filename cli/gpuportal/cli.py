"""The `gpuportal` commands. Each one is a few REST calls; see client.py for retries and errors."""

from __future__ import annotations

import functools
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import click

from gpuportal import __version__
from gpuportal.client import Client
from gpuportal.config import forget_settings, load_settings, normalise_url, save_settings
from gpuportal.durations import parse_minutes, parse_seconds
from gpuportal.errors import (
    EXIT_CODES_HELP,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_SERVER,
    EXIT_USAGE,
    CliError,
)
from gpuportal.job_flags import advanced_fields, parse_device, parse_secret_env
from gpuportal.output import echo_table, emit_json, short_time

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
POLL_SECONDS = 2.0


# --- plumbing -------------------------------------------------------------------------------


def json_option(func: Callable) -> Callable:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table."
    )(func)


def api(func: Callable) -> Callable:
    """Give the command a Client built from the stored login or the environment."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        settings = load_settings()
        client = Client(settings.url, settings.token, on_retry=_say_retrying)
        try:
            return func(client, *args, **kwargs)
        finally:
            client.close()

    return wrapper


def _say_retrying(message: str) -> None:
    click.echo(f"gpuportal: {message}", err=True)


class Group(click.Group):
    """Report CliError on one line with its exit code, and Ctrl-C without a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as exc:
            click.echo(f"gpuportal: {exc.message}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("", err=True)
            ctx.exit(130)


def job_path(job_id: int, suffix: str = "") -> str:
    return f"/api/v1/jobs/{job_id}/{suffix}"


def gpus_total(job: dict) -> str:
    """What the job holds in all: pods × GPUs per pod, or the MIG slice."""
    if job.get("mig_profile"):
        return f"1 × {job['mig_profile']}"
    replicas = job.get("replicas") or 1
    gpus = job.get("gpus") or 0
    return f"{replicas} × {gpus}" if replicas > 1 else str(gpus)


# --- the group ------------------------------------------------------------------------------


@click.group(
    cls=Group,
    epilog=EXIT_CODES_HELP
    + "\n\nConfiguration: 'gpuportal login' stores URL and token in ~/.config/gpuportal/"
    "config.json (mode 0600); GPUPORTAL_URL and GPUPORTAL_TOKEN override it.",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="gpuportal")
def cli() -> None:
    """Submit, watch and script GPU training jobs on GPU Portal.

    \b
    Examples:
      gpuportal login --url https://portal.example.org
      gpuportal submit --project vision --gpus 2 --image pytorch/pytorch:2.4.0 -- python train.py
      gpuportal jobs --project vision --state running
      gpuportal logs 42 -f
      gpuportal wait 42 43 && echo "all succeeded"
    """


def main() -> None:
    cli(prog_name="gpuportal")


# --- login ----------------------------------------------------------------------------------


@cli.command()
@click.option("--url", required=True, help="The portal's address, e.g. https://portal.example.org.")
@click.option("--token-stdin", is_flag=True, help="Read the token from standard input.")
@json_option
def login(url: str, token_stdin: bool, as_json: bool) -> None:
    """Store the portal's URL and your API token (create one on your profile page).

    The token is checked against the portal before it is stored.

    \b
    Examples:
      gpuportal login --url https://portal.example.org
      echo "$TOKEN" | gpuportal login --url https://portal.example.org --token-stdin
    """
    if token_stdin:
        token = sys.stdin.readline().strip()
    else:
        token = click.prompt("API token", hide_input=True).strip()
    if not token:
        raise CliError("No token given.", EXIT_USAGE)
    client = Client(normalise_url(url), token)
    try:
        me = client.get("/api/v1/me/")
    finally:
        client.close()
    path = save_settings(url, token)
    if as_json:
        emit_json({"url": normalise_url(url), "user": me.get("username"), "config": str(path)})
    else:
        click.echo(f"Logged in to {normalise_url(url)} as {me.get('username')} (saved in {path}).")


@cli.command()
@json_option
def logout(as_json: bool) -> None:
    """Forget the stored URL and token (the token itself stays valid until it expires)."""
    removed = forget_settings()
    if as_json:
        emit_json({"removed": removed})
    else:
        click.echo("Logged out." if removed else "Nothing stored; nothing to forget.")


@cli.command()
@json_option
@api
def whoami(client: Client, as_json: bool) -> None:
    """Who the token belongs to, its expiry, and your projects and roles."""
    me = client.get("/api/v1/me/")
    if as_json:
        emit_json(me)
        return
    click.echo(f"User:    {me.get('username')}{' (staff)' if me.get('is_staff') else ''}")
    click.echo(f"Portal:  {client.base}")
    expiry = me.get("token_expiry")
    if "token_expiry" in me:
        click.echo(f"Token:   {'expires ' + short_time(expiry) if expiry else 'never expires'}")
    projects = me.get("projects") or []
    if projects:
        click.echo("Projects:")
        for project in projects:
            click.echo(f"  {project['slug']:<24} {project['role']}")
    else:
        click.echo("Projects: none yet; ask a project admin to add you.")


# --- catalogue ------------------------------------------------------------------------------


def _in_use(project: dict, quota: dict) -> str:
    """What the project uses of one quota row now (the cluster's queue status)."""
    used = [
        row["in_use"]
        for row in project.get("usage") or []
        if row.get("resource") == quota.get("resource") and row.get("pool") in ("", quota["pool"])
    ]
    if not used:
        return "-"
    total = sum(float(value) for value in used)
    return str(int(total)) if total.is_integer() else f"{total:g}"


@cli.command()
@json_option
@api
def projects(client: Client, as_json: bool) -> None:
    """Your projects with their quota and current use per pool and resource."""
    items = client.all_pages("/api/v1/projects/")
    if as_json:
        emit_json(items)
        return
    rows = []
    for project in items:
        quotas = project.get("quotas") or []
        if not quotas:
            rows.append([project["slug"], project.get("my_role"), "-", "-", "-", "-", "-"])
        for quota in quotas:
            limit = quota.get("maximum")
            rows.append(
                [
                    project["slug"],
                    project.get("my_role"),
                    quota.get("pool"),
                    quota.get("resource"),
                    _in_use(project, quota),
                    quota.get("nominal"),
                    limit,
                ]
            )
    echo_table(
        ["project", "role", "pool", "resource", "in use", "guaranteed", "maximum"],
        rows,
        "You belong to no project yet; ask a project admin to add you.",
    )


@cli.command()
@json_option
@api
def pools(client: Client, as_json: bool) -> None:
    """GPU pools: model, scheduler, capacity, free GPUs, MIG profiles and GPU fractions."""
    items = client.all_pages("/api/v1/pools/")
    if as_json:
        emit_json(items)
        return
    rows = [
        [
            pool["slug"],
            pool.get("gpu_model"),
            pool.get("scheduler") or "kueue",
            pool.get("node_count"),
            pool.get("total_gpus"),
            pool.get("free_gpus"),
            ", ".join(pool.get("mig_profiles") or []) or "-",
            f"steps of {pool.get('fraction_step')}" if pool.get("fractions_allowed") else "-",
        ]
        for pool in items
    ]
    echo_table(
        ["pool", "gpu model", "scheduler", "nodes", "gpus", "free", "mig profiles", "fractions"],
        rows,
        "No pools.",
    )


# --- submit ---------------------------------------------------------------------------------


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE.", param_hint="--env")
        env[key] = value
    return env


def build_job_request(
    *,
    project: str,
    name: str | None,
    gpus: int | None,
    mig: str | None,
    gang: int | None,
    backend: str | None,
    pool: str | None,
    priority: str | None,
    image: str | None,
    env: tuple[str, ...],
    cpu: str | None,
    memory: str | None,
    max_runtime: str | None,
    command: tuple[str, ...],
    template: str | None = None,
    secret_env: tuple[str, ...] = (),
    gpu_fraction: float | None = None,
    gpu_memory: int | None = None,
    device: tuple[str, ...] = (),
    **advanced: Any,
) -> dict[str, Any]:
    """The POST /api/v1/jobs/ body for the flags given (the portal does the validation).

    With a template, only the flags given are sent: the portal fills in the rest from the
    template, and these override it."""
    if mig and gang:
        raise click.UsageError("--mig and --gang do not go together: a gang uses whole GPUs.")
    if mig and gpus:
        raise click.UsageError("--mig takes one MIG slice; leave out --gpus.")
    if not image and not template:
        raise click.UsageError("Give --image (or --template NAME, a saved template).")
    fraction = gpu_fraction is not None or gpu_memory is not None
    if fraction and (mig or gang or gpus):
        raise click.UsageError(
            "--gpu-fraction/--gpu-memory ask for part of one GPU: leave out --gpus, --mig and "
            "--gang."
        )
    body: dict[str, Any] = {"project": project}
    if template:
        body["template"] = template
    if image:
        body["image"] = image
    if mig:
        body.update(kind="mig", mig_profile=mig)
    elif gang:
        body.update(kind="gang", replicas=gang, gpus=gpus if gpus is not None else 8)
    elif fraction:
        body["kind"] = "single"
        if gpu_fraction is not None:
            body["gpu_fraction"] = gpu_fraction
        if gpu_memory is not None:
            body["gpu_memory"] = gpu_memory
    elif not template:
        body.update(kind="single", gpus=gpus if gpus is not None else 1)
    elif gpus is not None:
        body["gpus"] = gpus
    optional = {
        "name": name,
        "backend": backend,
        "pool": pool,
        "priority": priority,
        "cpu": cpu,
        "memory": memory,
    }
    body.update({k: v for k, v in optional.items() if v})
    if device:
        body["device"] = parse_device(device)
    plain = _parse_env(env)
    refs = parse_secret_env(secret_env)
    both = sorted(set(plain) & set(refs))
    if both:
        raise click.UsageError(f"{', '.join(both)}: given both by --env and by --secret-env.")
    if plain or refs:
        body["env"] = {**plain, **refs}
    body.update(advanced_fields(**advanced))
    if max_runtime:
        try:
            body["max_runtime_minutes"] = parse_minutes(max_runtime)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-runtime") from exc
    if command:
        body["command"] = list(command)
    return body


@cli.command(context_settings={"allow_interspersed_args": False})
@click.option("--project", "-p", required=True, help="Project slug.")
@click.option("--name", help="Job name (lower case, digits, '-'); generated when left out.")
@click.option("--gpus", type=int, help="GPUs per pod (default 1; 8 for a gang).")
@click.option("--mig", metavar="PROFILE", help="Run on one MIG slice, e.g. 1g.10gb.")
@click.option("--gang", type=int, metavar="N", help="All-or-nothing gang of N pods.")
@click.option(
    "--gpu-fraction",
    type=float,
    metavar="F",
    help="A fraction of one GPU, e.g. 0.5 (KAI pools that allow fractions).",
)
@click.option(
    "--gpu-memory", type=click.IntRange(min=1), metavar="MIB", help="MiB of one GPU (KAI pools)."
)
@click.option(
    "--device",
    multiple=True,
    metavar="KEY=VALUE",
    help="DRA pools: the GPU by its attributes (repeatable): product_name, architecture, "
    "min_compute_capability, min_memory, e.g. --device min_memory=40Gi.",
)
@click.option(
    "--backend",
    type=click.Choice(["kueue", "volcano", "kai"]),
    help="Scheduler (default: the pool's).",
)
@click.option("--pool", help="GPU pool slug (default: any pool the project has quota in).")
@click.option("--priority", type=click.Choice(["high", "normal", "low"]), help="Default: normal.")
@click.option("--image", help="Container image, e.g. pytorch/pytorch:2.4.0 (or from --template).")
@click.option(
    "--template",
    "-t",
    metavar="NAME",
    help="A saved template of the project; the other flags given override its fields.",
)
@click.option("--env", "-e", multiple=True, metavar="KEY=VALUE", help="Environment (repeatable).")
@click.option("--cpu", help="CPU per pod, e.g. 8 or 500m.")
@click.option("--memory", help="Memory per pod, e.g. 64Gi.")
@click.option("--max-runtime", metavar="DURATION", help="e.g. 90m, 2h, 1d (default: 24h).")
@click.option(
    "--mount",
    multiple=True,
    metavar="VOLUME[:PATH][:ro|rw]",
    help="A data volume of the project (repeatable); default: its own path and access.",
)
@click.option("--shm-size", metavar="SIZE", help="Shared memory (the /dev/shm mount), e.g. 8Gi.")
@click.option(
    "--grace",
    type=click.IntRange(min=0),
    metavar="SECONDS",
    help="Seconds between SIGTERM and the kill on preemption or cancel (default 60).",
)
@click.option(
    "--resume-from",
    type=click.IntRange(min=1),
    metavar="JOB_ID",
    help="Continue in the checkpoint directory of this finished job.",
)
@click.option(
    "--secret-env",
    multiple=True,
    metavar="NAME=CREDENTIAL/KEY",
    help="An env variable read from a project credential (repeatable).",
)
@click.option(
    "--secret-file",
    multiple=True,
    metavar="CREDENTIAL:PATH",
    help="A credential's keys as read-only files in PATH (repeatable).",
)
@click.option(
    "--array", type=click.IntRange(min=1), metavar="N", help="An array of N copies of the job."
)
@click.option(
    "--sweep",
    multiple=True,
    metavar="NAME=V1,V2",
    help="A parameter of a sweep (repeatable); one job per combination, SWEEP_<NAME> set.",
)
@click.option(
    "--parallelism",
    type=click.IntRange(min=1),
    metavar="P",
    help="With --array or --sweep: at most P of its jobs at once.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate and print the manifests and the start forecast; store nothing.",
)
@click.option("--wait", "wait_", is_flag=True, help="Block until the job ends; exit 1 if it fails.")
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="The submission's Idempotency-Key (default: a new UUID). Running the command again "
    "with the same key returns the first job instead of submitting a second one.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@json_option
@api
def submit(
    client: Client,
    as_json: bool,
    dry_run: bool,
    wait_: bool,
    idempotency_key: str | None,
    **flags: Any,
) -> None:
    """Submit a job; the command to run comes after '--'.

    The submission carries an Idempotency-Key, so it is retried safely (for up to two minutes)
    when the portal is unavailable or the connection breaks: a retry can never create the job
    twice. Pass --idempotency-key to repeat a whole command safely from a script.

    \b
    Examples:
      gpuportal submit -p vision --gpus 1 --image pytorch/pytorch:2.4.0 -- python train.py
      gpuportal submit -p vision --mig 1g.10gb --image busybox -- sh -c 'echo hi'
      gpuportal submit -p vision --gpu-fraction 0.5 --image img -- python notebook.py
      gpuportal submit -p vision --pool dra --device min_memory=40Gi --image img -- ./train.sh
      gpuportal submit -p vision --gang 2 --gpus 8 --backend volcano --image img -- torchrun x.py
      gpuportal submit -p vision --image busybox --dry-run -- true
      gpuportal submit -p vision --image busybox --wait --max-runtime 2h -e SEED=1 -- ./run.sh
      gpuportal submit -p vision --template nightly --gpus 2
      gpuportal submit -p vision --image img --mount imagenet:/data:ro --shm-size 8Gi -- ./train.sh
      gpuportal submit -p vision --image img --secret-env HF_TOKEN=hf/token -- ./train.sh
      gpuportal submit -p vision --image img --sweep lr=0.1,0.01 --parallelism 1 -- ./train.sh
    """
    body = build_job_request(**flags)
    is_array = "array" in body or "sweep" in body
    if is_array and wait_:
        raise click.UsageError("--wait takes one job; follow an array with `gpuportal jobs`.")
    if dry_run:
        outcome = client.post("/api/v1/jobs/", body, params={"dry_run": "true"})
        if as_json:
            emit_json(outcome)
        elif outcome.get("valid"):
            click.echo(json.dumps(outcome.get("manifests", []), indent=2))
        if not as_json:
            _print_warnings(outcome)
            _print_forecast(outcome)
        if not outcome.get("valid"):
            if not as_json:
                for field, messages in (outcome.get("errors") or {}).items():
                    for message in messages:
                        click.echo(f"gpuportal: {field}: {message}", err=True)
            sys.exit(EXIT_USAGE)
        return
    job = client.post("/api/v1/jobs/", body, idempotency_key=idempotency_key or str(uuid.uuid4()))
    if not as_json:
        _print_warnings(job)
    if is_array:
        if as_json:
            emit_json(job)
        else:
            click.echo(
                f"Submitted array {job['id']} ({job['name']}) of {job['count']} jobs in "
                f"project {job['project']}."
            )
        return
    _report_submitted(client, job, f"in project {job['project']}", wait_=wait_, as_json=as_json)


def _report_submitted(
    client: Client, job: dict[str, Any], where: str, *, wait_: bool, as_json: bool
) -> None:
    """Say a job was submitted (`where`: what follows its name), or with --wait follow it to
    its end and exit with its outcome."""
    if not wait_:
        if as_json:
            emit_json(job)
        else:
            click.echo(f"Submitted job {job['id']} ({job['name']}) {where}.")
        return
    if not as_json:
        click.echo(f"Submitted job {job['id']} ({job['name']}); waiting for it to end...")
    final = _wait_for(client, [job["id"]], timeout=None, quiet=as_json)
    if as_json:
        emit_json(final[0])
    sys.exit(EXIT_OK if final[0]["state"] == "succeeded" else EXIT_JOB_FAILED)


def _print_forecast(answer: dict[str, Any]) -> None:
    """When the dry-run job would likely start (on stderr: stdout stays the manifests' JSON)."""
    forecast = answer.get("forecast")
    if isinstance(forecast, dict) and forecast.get("text"):
        where = f" (pool {forecast['pool']})" if forecast.get("pool") else ""
        click.echo(f"gpuportal: forecast: {forecast['text']}{where}", err=True)


def _print_warnings(answer: dict[str, Any]) -> None:
    """Advice that did not stop the submission (e.g. a token typed as a plain value)."""
    for warning in answer.get("warnings") or []:
        click.echo(f"gpuportal: warning: {warning}", err=True)


# --- jobs -----------------------------------------------------------------------------------

JOB_STATES = [
    "submitted",
    "queued",
    "admitted",
    "running",
    "preempted",
    "succeeded",
    "failed",
    "cancelled",
]


def _job_rows(jobs: list[dict]) -> list[list[Any]]:
    return [
        [
            job["id"],
            job["project"],
            job["name"],
            job["kind"],
            job["state"],
            gpus_total(job),
            job.get("pool"),
            job.get("submitter"),
            short_time(job.get("created_at")),
        ]
        for job in jobs
    ]


JOB_HEADERS = ["id", "project", "name", "kind", "state", "gpus", "pool", "submitter", "created"]


@cli.command()
@click.option("--project", "-p", help="Only this project.")
@click.option("--state", "-s", multiple=True, type=click.Choice(JOB_STATES), help="Repeatable.")
@click.option("--kind", type=click.Choice(["single", "mig", "gang"]))
@click.option("--submitter", help="Username; 'me' for your own jobs.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--watch", "-w", is_flag=True, help="Keep printing changes until Ctrl-C.")
@json_option
@api
def jobs(
    client: Client,
    as_json: bool,
    project: str | None,
    state: tuple[str, ...],
    kind: str | None,
    submitter: str | None,
    limit: int,
    watch: bool,
) -> None:
    """List jobs, newest first.

    With --watch, a line is printed whenever a listed job changes state (with --json, one
    JSON object per line).

    \b
    Examples:
      gpuportal jobs --project vision --state running --state queued
      gpuportal jobs --submitter me --json
      gpuportal jobs --watch
    """
    if submitter == "me":
        submitter = client.get("/api/v1/me/")["username"]
    params = {
        "project": project,
        "state": list(state),
        "kind": kind,
        "submitter": submitter,
        "page_size": min(limit, 100),
    }

    def fetch() -> list[dict]:
        found: list[dict] = []
        body = client.get("/api/v1/jobs/", params)
        while True:
            found.extend(body.get("results", []))
            if len(found) >= limit or not body.get("next"):
                return found[:limit]
            body = client._json(client._send("GET", body["next"], retry="idempotent"))

    listed = fetch()
    if as_json and not watch:
        emit_json(listed)
        return
    if as_json:
        for job in listed:
            click.echo(json.dumps(job, sort_keys=True))
    else:
        echo_table(JOB_HEADERS, _job_rows(listed), "No jobs match.")
    if not watch:
        return
    seen = {job["id"]: job["state"] for job in listed}
    while True:
        time.sleep(POLL_SECONDS)
        for job in reversed(fetch()):
            if seen.get(job["id"]) == job["state"]:
                continue
            seen[job["id"]] = job["state"]
            if as_json:
                click.echo(json.dumps(job, sort_keys=True))
            else:
                click.echo(
                    f"{short_time(time.strftime('%Y-%m-%dT%H:%M:%S'))}  job {job['id']} "
                    f"({job['project']}/{job['name']}) is {job['state']}"
                    + (f": {job['state_message']}" if job.get("state_message") else "")
                )


def _position(job: dict) -> str | None:
    position = job.get("queue_position")
    if position is None:
        return None
    length = job.get("queue_length")
    return f"{position} of {length} in the queue" if length else f"{position} in the queue"


@cli.command()
@click.argument("job_id", metavar="JOB", type=int)
@click.option(
    "--events",
    "n_events",
    type=int,
    default=5,
    show_default=True,
    help="How many of the latest events to show.",
)
@json_option
@api
def status(client: Client, job_id: int, n_events: int, as_json: bool) -> None:
    """A job's state, why it waits (explanation, queue position) and its latest events.

    \b
    Example:
      gpuportal status 42
    """
    job = client.get(job_path(job_id))
    if as_json:
        emit_json(job)
        return
    click.echo(
        f"Job {job['id']}: {job['project']}/{job['name']}  ({job['kind']}, {gpus_total(job)} GPU)"
    )
    click.echo(
        f"State:     {job['state']}"
        + (f" ({job['state_reason']})" if job.get("state_reason") else "")
    )
    if job.get("state_message"):
        click.echo(f"Message:   {job['state_message']}")
    if job.get("explanation"):
        click.echo(f"Why:       {job['explanation']}")
    if _position(job):
        click.echo(f"Position:  {_position(job)}")
    click.echo(f"Pool:      {job.get('pool') or 'any'}   Priority: {job.get('priority')}")
    click.echo(f"Submitted: {short_time(job.get('created_at'))} by {job.get('submitter')}")
    events = job.get("events") or []
    if events and n_events > 0:
        click.echo("Events:")
        for event in events[-n_events:]:
            sentence = event.get("message") or event.get("reason") or ""
            when = short_time(event.get("created_at"))
            click.echo(f"  {when}  {event.get('to_state') or '':<10} {sentence}")


# --- logs and metrics -----------------------------------------------------------------------


@cli.command()
@click.argument("job_id", metavar="JOB", type=int)
@click.option("--follow", "-f", is_flag=True, help="Stream until the pod ends.")
@click.option("--rank", type=int, help="Gang pod rank (default 0).")
@click.option("--pod", help="Pod name (instead of --rank).")
@click.option("--tail", type=int, help="Only the last N lines.")
@click.option("--since", help="Only lines newer than this, e.g. 10m, 2h.")
@click.option("--previous", is_flag=True, help="The previous (restarted) container's logs.")
@click.option("--json", "as_json", is_flag=True, help='Print {"job": ID, "log": TEXT} as JSON.')
@api
def logs(
    client: Client,
    job_id: int,
    follow: bool,
    rank: int | None,
    pod: str | None,
    tail: int | None,
    since: str | None,
    previous: bool,
    as_json: bool,
) -> None:
    """Print a job's logs (rank 0 or the only pod by default).

    \b
    Examples:
      gpuportal logs 42 --tail 100
      gpuportal logs 42 -f --rank 1
    """
    params: dict[str, Any] = {"rank": rank, "pod": pod, "tail": tail}
    if since:
        try:
            params["since"] = parse_seconds(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from exc
    if previous:
        params["previous"] = "true"
    path = job_path(job_id, "logs/")
    if follow and not as_json:
        params["follow"] = "true"
        for chunk in client.stream_text(path, params):
            click.echo(chunk, nl=False)
        return
    text = client.get_text(path, params)
    if as_json:
        emit_json({"job": job_id, "log": text})
    else:
        click.echo(text, nl=not text.endswith("\n"))


@cli.command()
@click.argument("job_id", metavar="JOB", type=int)
@click.option(
    "--series",
    help="Comma-separated series, e.g. util,fb_used (see the API docs); omit for the summary.",
)
@click.option("--since", help="ISO time or a duration ago, e.g. 1h.")
@click.option("--until", help="ISO time.")
@click.option("--step", help="Resolution in seconds, e.g. 60.")
@json_option
@api
def metrics(
    client: Client,
    job_id: int,
    series: str | None,
    since: str | None,
    until: str | None,
    step: str | None,
    as_json: bool,
) -> None:
    """A job's GPU efficiency summary, or its metric series with --series.

    \b
    Examples:
      gpuportal metrics 42
      gpuportal metrics 42 --series util,tensor --step 60
    """
    if since:
        # A duration ("1h") means that long ago; anything else goes to the portal as given.
        try:
            seconds_ago = parse_seconds(since)
        except ValueError:
            pass
        else:
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))
    params = {"series": series, "since": since, "until": until, "step": step}
    body = client.get(job_path(job_id, "metrics/"), params)
    if as_json:
        emit_json(body)
        return
    summary = body.get("summary") if isinstance(body, dict) else None
    if not series:
        if not summary:
            click.echo("No metrics summary for this job yet.")
            return
        for key, value in summary.items():
            click.echo(f"{key.replace('_', ' '):<28} {value}")
        return
    rows = []
    wanted = [name.strip() for name in series.split(",") if name.strip()]
    for device in body.get("devices", []):
        gpu = device.get("uuid", "-")
        if device.get("mig_instance_id"):
            gpu = f"{gpu}/{device['mig_instance_id']} ({device.get('mig_profile')})"
        means = device.get("mean") or {}
        for index, stamp in enumerate(device.get("timestamps") or []):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
            for name in wanted:
                values = means.get(name) or []
                value = values[index] if index < len(values) else None
                rows.append([name, device.get("pod"), gpu, when, value])
    echo_table(["series", "pod", "gpu", "time", "value"], rows, "No samples in that range.")


# --- cancel and wait ------------------------------------------------------------------------


@cli.command()
@click.argument("job_ids", metavar="JOB...", type=int, nargs=-1, required=True)
@json_option
@api
def cancel(client: Client, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Cancel jobs; their pods are stopped and their GPUs freed.

    \b
    Example:
      gpuportal cancel 42 43
    """
    results, worst = [], EXIT_OK
    for job_id in job_ids:
        try:
            job = client.post(job_path(job_id, "cancel/"))
        except CliError as exc:
            worst = max(worst, exc.exit_code)
            results.append({"id": job_id, "cancelled": False, "error": exc.message})
            if not as_json:
                click.echo(f"gpuportal: job {job_id}: {exc.message}", err=True)
            continue
        results.append({"id": job_id, "cancelled": True, "state": job["state"]})
        if not as_json:
            click.echo(f"Cancelled job {job_id} ({job['name']}).")
    if as_json:
        emit_json(results)
    sys.exit(worst)


@cli.command()
@click.argument("job_id", metavar="JOB", type=int)
@click.option("--wait", "wait_", is_flag=True, help="Block until the new job ends.")
@json_option
@api
def resubmit(client: Client, job_id: int, wait_: bool, as_json: bool) -> None:
    """Submit a job again: a new job with the same request (the old one is left as it is).

    \b
    Example:
      gpuportal resubmit 42 --wait
    """
    job = client.post(job_path(job_id, "resubmit/"))
    if not as_json:
        _print_warnings(job)
    _report_submitted(client, job, f"again of job {job_id}", wait_=wait_, as_json=as_json)


def _wait_for(
    client: Client, job_ids: list[int], *, timeout: float | None, quiet: bool
) -> list[dict]:
    """Poll until every job is terminal; print each ending as it happens (unless quiet)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    final: dict[int, dict] = {}
    while True:
        for job_id in job_ids:
            if job_id in final:
                continue
            job = client.get(job_path(job_id))
            if job["state"] in TERMINAL_STATES:
                final[job_id] = job
                if not quiet:
                    detail = f": {job['state_message']}" if job.get("state_message") else ""
                    click.echo(f"Job {job_id} ({job['name']}) {job['state']}{detail}")
        if len(final) == len(job_ids):
            return [final[job_id] for job_id in job_ids]
        if deadline is not None and time.monotonic() >= deadline:
            pending = [str(j) for j in job_ids if j not in final]
            raise CliError(f"Timed out; still running: {', '.join(pending)}.", EXIT_SERVER)
        time.sleep(POLL_SECONDS)


@cli.command()
@click.argument("job_ids", metavar="JOB...", type=int, nargs=-1, required=True)
@click.option("--timeout", help="Give up after this long (exit 5), e.g. 30m.")
@json_option
@api
def wait(client: Client, job_ids: tuple[int, ...], timeout: str | None, as_json: bool) -> None:
    """Block until every job ends; exit 0 only when all succeeded (1 otherwise).

    \b
    Examples:
      gpuportal wait 42 && gpuportal submit -p vision --image img -- python eval.py
      gpuportal wait 42 43 --timeout 2h
    """
    seconds = None
    if timeout:
        try:
            seconds = parse_seconds(timeout)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--timeout") from exc
    final = _wait_for(client, list(job_ids), timeout=seconds, quiet=as_json)
    if as_json:
        emit_json(
            [
                {
                    "id": job["id"],
                    "name": job["name"],
                    "state": job["state"],
                    "state_message": job.get("state_message"),
                }
                for job in final
            ]
        )
    all_ok = all(job["state"] == "succeeded" for job in final)
    sys.exit(EXIT_OK if all_ok else EXIT_JOB_FAILED)


# --- workspaces ------------------------------------------------------------------------------


@cli.group()
def workspace() -> None:
    """Interactive workspaces (JupyterLab, VS Code) opened through the portal."""


@workspace.command("start")
@click.option("--project", "-p", required=True, help="Project slug.")
@click.option("--kind", "-k", default="jupyterlab", show_default=True, help="Workspace kind.")
@click.option("--shape", "-s", default="", help="gpu:N or mig:PROFILE (default: the kind's).")
@click.option("--name", default="", help="Workspace name (default: generated).")
@click.option("--volume", "volumes", multiple=True, help="Data volume to mount (repeatable).")
@click.option("--shared", is_flag=True, help="Let the project's members open it too.")
@json_option
@api
def workspace_start(
    client: Client,
    project: str,
    kind: str,
    shape: str,
    name: str,
    volumes: tuple[str, ...],
    shared: bool,
    as_json: bool,
) -> None:
    """Start a workspace; it queues like a job and opens in the browser once running.

    \b
    Example:
      gpuportal workspace start -p vision -s mig:1g.10gb --volume datasets
    """
    body = {"project": project, "kind": kind, "shape": shape, "name": name, "shared": shared}
    body["mounts"] = [{"volume": v} for v in volumes]
    ws = client.post("/api/v1/workspaces/", body)
    if as_json:
        emit_json(ws)
        return
    click.echo(f"Workspace {ws['id']} ({ws['name']}) is {ws['state']}.")
    click.echo(f"Open it at {client.base}{ws['url']} once it runs.")


@workspace.command("list")
@json_option
@api
def workspace_list(client: Client, as_json: bool) -> None:
    """Your workspaces (and those shared with you)."""
    found = client.get("/api/v1/workspaces/").get("results", [])
    if as_json:
        emit_json(found)
        return
    keys = ("id", "name", "kind", "project", "shape", "state")
    rows = [[*(w[k] for k in keys), client.base + w["url"]] for w in found]
    echo_table(["id", "name", "kind", "project", "shape", "state", "url"], rows, "No workspaces.")


@workspace.command("stop")
@click.argument("workspace_id", type=int)
@json_option
@api
def workspace_stop(client: Client, workspace_id: int, as_json: bool) -> None:
    """Stop a workspace; its volumes are kept for `workspace again`."""
    ws = client.post(f"/api/v1/workspaces/{workspace_id}/stop/")
    if as_json:
        emit_json(ws)
        return
    click.echo(f"Workspace {workspace_id} ({ws['name']}) is stopping.")


@workspace.command("again")
@click.argument("workspace_id", type=int)
@json_option
@api
def workspace_again(client: Client, workspace_id: int, as_json: bool) -> None:
    """Start a stopped workspace again, with the same volumes."""
    ws = client.post(f"/api/v1/workspaces/{workspace_id}/start/")
    if as_json:
        emit_json(ws)
        return
    click.echo(f"Workspace {workspace_id} ({ws['name']}) is {ws['state']}.")


# --- shell completion -----------------------------------------------------------------------


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script.

    \b
    Examples:
      eval "$(gpuportal completion bash)"        # in ~/.bashrc
      gpuportal completion fish > ~/.config/fish/completions/gpuportal.fish
    """
    from click.shell_completion import get_completion_class

    completer_class = get_completion_class(shell)
    if completer_class is None:  # pragma: no cover - click ships all three
        raise CliError(f"No completion for {shell}.", EXIT_USAGE)
    completer = completer_class(cli, {}, "gpuportal", "_GPUPORTAL_COMPLETE")
    click.echo(completer.source())


__all__ = ["cli", "main"]

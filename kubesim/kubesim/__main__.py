"""`python -m kubesim`: the simulated cluster's HTTPS Kubernetes API server.

python -m kubesim --port PORT --kubeconfig-out PATH [--crds DIR ...] [--no-default-crds]
                  [--state FILE] [--cluster FILE] [--speed N] [--default-duration SECONDS]
                  [--no-cluster] [--rbac]

The Kueue, Volcano and KAI CRDs the portal targets ship inside the package (kubesim/crds/) and
are loaded by default, so a kubesim started with no flags validates as the tests' kubesims do.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import secrets
import signal
import sys
import tempfile
from pathlib import Path

import yaml

from kubesim import controllers, tls
from kubesim.api.builtins import register_builtins
from kubesim.api.crds import CrdManager, builtin_crds, read_crd_files
from kubesim.api.registry import Registry
from kubesim.api.server import KubeServer
from kubesim.api.store import SYSTEM_NAMESPACES, Store
from kubesim.clock import SimClock

log = logging.getLogger("kubesim")
STATE_SAVE_INTERVAL = 1.0
# The CRDs vendored with kubesim (Kueue v0.19.2, Volcano v1.15.1, KAI v0.17.0; see its README).
DEFAULT_CRDS_DIR = Path(__file__).resolve().parent / "crds"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kubesim",
        description="A local simulated GPU Kubernetes cluster speaking the Kubernetes API.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="port on 127.0.0.1 (0 picks a free one, printed at start)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--kubeconfig-out",
        required=True,
        type=Path,
        help="where to write a kubeconfig (server, CA, bearer token)",
    )
    parser.add_argument(
        "--crds",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="also load every CustomResourceDefinition YAML under DIR (repeatable); a CRD "
        "named like a vendored one replaces it",
    )
    parser.add_argument(
        "--no-default-crds",
        action="store_true",
        help=f"do not load the vendored Kueue/Volcano/KAI CRDs ({DEFAULT_CRDS_DIR}); with no "
        "--crds either, those kinds are served schema-less (nothing is validated)",
    )
    parser.add_argument(
        "--state", type=Path, default=None, help="persist objects to FILE and restore them at start"
    )
    parser.add_argument("--token", default=None, help="bearer token (default: random)")
    parser.add_argument(
        "--cluster",
        type=Path,
        default=None,
        help="cluster description YAML (nodes, GPUs); default: built-in",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated clock speed (2 = twice as fast as the wall clock)",
    )
    parser.add_argument(
        "--default-duration",
        type=float,
        default=None,
        help="simulated run time of a container that does not say",
    )
    parser.add_argument(
        "--no-cluster", action="store_true", help="API machinery only: no nodes, no controllers"
    )
    parser.add_argument(
        "--history",
        type=int,
        default=None,
        help="watch history kept, in events (older resumes answer 410)",
    )
    parser.add_argument(
        "--rbac",
        action="store_true",
        help="enforce RBAC as kube-apiserver does (Roles, ClusterRoles and bindings; the "
        "bootstrap roles are created); the admin kubeconfig stays allowed everything",
    )
    parser.add_argument("--log-level", default=os.environ.get("KUBESIM_LOG_LEVEL", "WARNING"))
    return parser.parse_args(argv)


def kubeconfig(server_url: str, ca_pem: bytes, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubesim",
                "cluster": {
                    "server": server_url,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "kubesim", "user": {"token": token}}],
        "contexts": [
            {
                "name": "kubesim",
                "context": {"cluster": "kubesim", "user": "kubesim", "namespace": "default"},
            }
        ],
        "current-context": "kubesim",
        "preferences": {},
    }


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def crd_dirs(options: argparse.Namespace) -> list[Path]:
    """The CRD directories to load, in precedence order (the first CRD of a name wins): every
    --crds DIR, then the vendored ones unless --no-default-crds; each directory once."""
    dirs = [*options.crds, *([] if options.no_default_crds else [DEFAULT_CRDS_DIR])]
    unique: dict[Path, Path] = {}
    for directory in dirs:
        unique.setdefault(Path(directory).resolve(), Path(directory))
    return list(unique.values())


def build(options: argparse.Namespace) -> tuple[Store, CrdManager]:
    registry = Registry()
    register_builtins(registry)
    clock = SimClock(options.speed)
    store_kwargs = {"history_size": options.history} if options.history else {}
    store = Store(registry, clock, **store_kwargs)
    crd_manager = CrdManager(store)
    restored = False
    if options.state is not None and options.state.exists() and options.state.stat().st_size:
        store.load(options.state.read_bytes(), crd_manager.install)
        restored = True
    if not restored:
        for name in SYSTEM_NAMESPACES:
            store.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                field_manager="kubesim",
            )
    dirs = crd_dirs(options)
    crd_manager.create_all(read_crd_files(dirs) if dirs else builtin_crds())
    return store, crd_manager


async def save_state_forever(store: Store, path: Path) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(STATE_SAVE_INTERVAL)
        if store.dirty:
            store.dirty = False
            data = store.dump()
            await loop.run_in_executor(None, write_atomically, path, data)


async def serve(options: argparse.Namespace) -> int:
    store, _ = build(options)
    token = options.token or secrets.token_urlsafe(32)
    server = KubeServer(store, token=token, rbac=options.rbac)
    server.auth.bootstrap()
    certificates = tls.generate((options.host, "localhost", "127.0.0.1"))
    server.auth.ca_pem = certificates.ca_pem
    workdir = Path(tempfile.mkdtemp(prefix="kubesim-"))
    port = await server.start(options.host, options.port, certificates.server_context(workdir))
    url = f"https://{options.host}:{port}"
    config = kubeconfig(url, certificates.ca_pem, token)
    server.ca_pem = certificates.ca_pem  # published in each namespace's kube-root-ca.crt
    write_atomically(options.kubeconfig_out, yaml.safe_dump(config, sort_keys=False).encode())
    tasks: list[asyncio.Task] = []
    if not options.no_cluster:
        tasks.extend(await controllers.start(server, options))
    if options.state is not None:
        tasks.append(asyncio.create_task(save_state_forever(store, options.state)))
    print(f"kubesim listening on {url}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await server.stop()
    from kubesim.controllers.node.workspace_apps import APPS

    APPS.stop_all()  # the workspace images' real servers
    if options.state is not None:
        write_atomically(options.state, store.dump())
    for leftover in workdir.iterdir():
        leftover.unlink()
    workdir.rmdir()
    return 0


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logging.basicConfig(
        level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        return asyncio.run(serve(options))
    except KeyboardInterrupt:
        return 0
    except (OSError, ValueError) as exc:  # a missing --crds dir, a port in use, bad state
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

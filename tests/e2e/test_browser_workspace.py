"""A researcher starts JupyterLab on a MIG slice, opens it through the portal, runs a cell over
the proxied WebSocket and sees the GPU the device plugin gave the pod; a neighbour gets 404;
once idle past the (shortened) timeout the workspace stops and its quota frees.

kubesim runs the real jupyter-server for the pod (kubesim/controllers/node/workspace_apps.py);
the portal reaches it through kubesim's API-server service proxy, as outside a cluster.
"""

import datetime

import pytest

from tests.asgi_server import start_asgi_server
from tests.e2e.conftest import screenshot, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def portal_server(tmp_path, worker_factory, e2e_redis_url, e2e_kubesim):
    """The shared fixture's server, also told where the cluster is (the proxy reaches it)."""
    worker_factory(beat_seconds=1)
    server = start_asgi_server(
        tmp_path,
        PORTAL_PUBSUB_URL=e2e_redis_url,
        CELERY_BROKER_URL=e2e_redis_url,
        KUBECONFIG=str(e2e_kubesim.kubeconfig),
    )
    yield server
    server.stop()


# Runs in the page: a notebook, a kernel session, and one cell over the kernel's WebSocket.
RUN_CELL = """
async ([base, code]) => {
  const post = async (path, body) => {
    const r = await fetch(base + path, {method: "POST", body: JSON.stringify(body),
      headers: {"Content-Type": "application/json"}});
    if (!r.ok) throw new Error(path + " answered " + r.status);
    return r.json();
  };
  const nb = await post("api/contents", {type: "notebook"});
  const session = await post("api/sessions",
    {path: nb.path, type: "notebook", name: nb.name, kernel: {name: "python3"}});
  const url = location.origin.replace("http", "ws") + base +
    "api/kernels/" + session.kernel.id + "/channels?session_id=portal-test";
  return await new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    let out = "";
    ws.onerror = () => reject(new Error("websocket error"));
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: "m1", username: "test", session: "portal-test",
               msg_type: "execute_request", version: "5.3"},
      parent_header: {}, metadata: {}, channel: "shell", buffers: [],
      content: {code: code, silent: false, store_history: true, user_expressions: {},
                allow_stdin: false, stop_on_error: true}}));
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.parent_header.msg_id !== "m1") return;
      if (msg.msg_type === "stream") out += msg.content.text;
      if (msg.msg_type === "error") reject(new Error(msg.content.evalue));
      if (msg.msg_type === "status" && msg.content.execution_state === "idle" && out) {
        ws.close(); resolve(out);
      }
    };
  });
}
"""


def _pod_gpus(ws):
    from jobs.manifests import job_selector
    from portal.kube import apply as kube

    pods = kube.list_objects(
        "v1", "Pod", namespace=ws.project.namespace, label_selector=job_selector(ws.job_id)
    )
    return (pods[0]["metadata"].get("annotations") or {}).get("kubesim.dev/gpu-uuids", "")


def _mig_in_use(project_slug: str) -> str:
    from portal.kube import apply as kube
    from quotas.manifests import cluster_queue_name

    queue = kube.get("kueue.x-k8s.io/v1beta1", "ClusterQueue", cluster_queue_name(project_slug))
    used = "0"
    for flavor in (queue or {}).get("status", {}).get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            if resource["name"] == "nvidia.com/mig-1g.10gb":
                used = str(resource.get("total", "0"))
    return used


def test_jupyter_workspace_on_a_mig_slice_through_the_portal(e2e_org, portal_server, page_for):
    from tests.factories import ensure_workspace_kinds
    from workspaces.models import Workspace
    from workspaces.services import workspace_cull

    ensure_workspace_kinds()  # earlier transactional tests flushed the seeded kinds
    bob, oscar = e2e_org["bob"], e2e_org["oscar"]
    page = page_for(bob)
    page.goto(portal_server.url + "/workspaces/")
    page.select_option("#id_project", "alpha")
    page.select_option("#id_kind", "jupyterlab")
    page.fill("#id_shape", "mig:1g.10gb")
    page.fill("#id_name", "nb")
    page.click("button:has-text('Start')")
    page.wait_for_url("**/workspaces/*/")
    ws = Workspace.objects.get(name="nb")
    assert ws.job.kind == "mig"

    def running():
        page.reload()
        return page.locator("#workspace-state", has_text="Running").count() == 1

    wait_for(running, timeout=120, interval=1, what="the workspace to run")
    assert page.locator("#open-workspace").get_attribute("href") == f"/ws/{ws.pk}/"
    assert page.locator("#time-left").count() == 1
    screenshot(page, "workspace-page")

    app = page_for(bob)
    status_url = f"{portal_server.url}/ws/{ws.pk}/api/status"
    wait_for(lambda: app.goto(status_url).status == 200, timeout=60, interval=1, what="Jupyter")
    assert "last_activity" in app.content()  # Jupyter's own answer, through the portal
    # The cell runs from the workspace's portal page (Jupyter's API answers carry a CSP that
    # forbids scripts; the Lab front-end is not installed where kubesim runs).
    code = "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'])"
    output = page.evaluate(RUN_CELL, [f"/ws/{ws.pk}/", code])
    ws.refresh_from_db()
    gpus = _pod_gpus(ws)
    assert gpus.startswith("MIG-")
    assert output.strip() == gpus
    assert _mig_in_use("alpha") == "1"

    # A neighbour: the same 404 as for a workspace that does not exist, headers and body.
    neighbour = page_for(oscar)
    theirs = neighbour.goto(f"{portal_server.url}/ws/{ws.pk}/api/status")
    theirs_seen = (theirs.status, theirs.body(), sorted(theirs.headers))
    nothing = neighbour.goto(f"{portal_server.url}/ws/{ws.pk + 1000}/api/status")
    assert theirs_seen == (404, nothing.body(), sorted(nothing.headers))
    assert nothing.status == 404

    # Idle past the timeout (1 minute here), judged two minutes from now: it stops.
    ws.kind.idle_timeout_minutes = 1
    ws.kind.save()
    later = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(minutes=2)
    assert workspace_cull(now=later) == [ws.pk]
    wait_for(lambda: _mig_in_use("alpha") == "0", timeout=120, what="the quota to free")

    page.reload()
    page.locator("#workspace-state", has_text="Stopped").wait_for()
    assert page.locator("button:has-text('Start again')").count() == 1
    screenshot(page, "workspace-stopped")

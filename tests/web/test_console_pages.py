"""The console pages through Django's test client: the cluster map against kubesim's nodes (who
holds which GPU, tenancy of the holders), the staff overview, the page of a user in no project,
the admin's current use and user autocomplete, the API docs' link back."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from portal.kube import nodes as kube_nodes

pytestmark = pytest.mark.django_db

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def cluster_settings(kubesim, settings):
    """The portal reads kubesim's built-in cluster; nothing remembered between tests."""
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kubesim.kubeconfig)
    reset_api_client()
    kube_nodes.forget()
    yield kubesim
    kube_nodes.forget()
    reset_api_client()


def node_gpus(name: str) -> list[dict]:
    from portal.kube.apply import get

    node = get("v1", "Node", name)
    return json.loads(node["metadata"]["annotations"][kube_nodes.GPUS_ANNOTATION])


@pytest.fixture
def make_job(personas):
    from jobs.models import Job

    def make(project, name, state="running", **fields):
        defaults = {
            "project": project,
            "submitter": personas.member,
            "name": name,
            "kind": "single",
            "image": "pytorch/pytorch:2.4.0",
            "gpus": 1,
            "cpu": "4",
            "memory": "16Gi",
            "max_runtime_minutes": 60,
            "backend": "kueue",
            "state": state,
        }
        defaults.update(fields)
        return Job.objects.create(**defaults)

    return make


def hold(job, node: str, uuids: list[str], phase="Running"):
    from jobs.models import JobPod

    return JobPod.objects.create(
        job=job,
        uid=f"uid-{job.pk}-{uuids[0]}",
        name=f"gp-job-{job.pk}",
        node=node,
        phase=phase,
        gpu_uuids=uuids,
    )


@pytest.fixture
def held_cluster(cluster_settings, personas, make_job):
    """Pools h100 (whole GPUs) and h100-mig (MIG node); an alpha job on GPU 0 of gpu-h100-0,
    a beta job on GPU 1, a beta job on a MIG slice, a finished alpha job that held GPU 2."""
    from tests.factories import GpuPoolFactory

    personas.pool.node_labels = {"kubesim.dev/pool": "gpu-h100"}
    personas.pool.save()
    GpuPoolFactory(
        slug="h100-mig",
        name="H100 MIG",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100, "kubesim.dev/pool": "gpu-h100-mig"},
        mig_profiles=["1g.10gb", "2g.20gb"],
    )
    gpus = node_gpus("gpu-h100-0")
    mig = node_gpus("gpu-h100-mig-0")
    ours = make_job(personas.project_a, "alpha-train")
    theirs = make_job(personas.project_b, "beta-secret-run")
    theirs_mig = make_job(
        personas.project_b, "beta-mig-run", kind="mig", gpus=0, mig_profile="1g.10gb"
    )
    done = make_job(personas.project_a, "alpha-done", state="succeeded")
    hold(ours, "gpu-h100-0", [gpus[0]["uuid"]])
    hold(theirs, "gpu-h100-0", [gpus[1]["uuid"]])
    hold(theirs_mig, "gpu-h100-mig-0", [mig[0]["migDevices"][0]["uuid"]])
    hold(done, "gpu-h100-0", [gpus[2]["uuid"]], phase="Succeeded")
    return {"ours": ours, "theirs": theirs, "mig": theirs_mig, "done": done, "gpus": gpus}


def gpu_cell(html: str, uuid: str) -> str:
    """The <li> of the device with this UUID (its title)."""
    start = html.index(f'title="{uuid}"')
    return html[start : html.index("</li>", start)]


def test_cluster_page_shows_who_holds_each_gpu(held_cluster, personas, web_client_for):
    response = web_client_for(personas.admin).get("/cluster/")
    assert response.status_code == 200
    html = response.content.decode()
    gpus = held_cluster["gpus"]
    ours = gpu_cell(html, gpus[0]["uuid"])
    assert f'href="/jobs/{held_cluster["ours"].pk}/"' in ours
    assert "alpha/alpha-train" in ours
    # a job of another tenant: no name, no project, no link, no id
    theirs = gpu_cell(html, gpus[1]["uuid"])
    assert "another project" in theirs
    assert "href" not in theirs
    assert "beta-secret-run" not in html
    assert "beta-mig-run" not in html
    assert f"/jobs/{held_cluster['theirs'].pk}/" not in html
    # a finished job holds nothing
    assert "free" in gpu_cell(html, gpus[2]["uuid"])
    # pools → nodes: the whole-GPU nodes under h100, the MIG node under h100-mig with slices
    pool_h100 = html[html.index('id="pool-h100"') : html.index('id="pool-h100-mig"')]
    assert 'id="node-gpu-h100-0"' in pool_h100
    assert 'id="node-gpu-h100-mig-0"' not in pool_h100
    assert "<strong>22</strong> free of 24" in pool_h100  # 3 nodes × 8 GPUs, 2 held
    mig_pool = html[html.index('id="pool-h100-mig"') :]
    assert 'id="node-gpu-h100-mig-0"' in mig_pool
    assert "1g.10gb" in mig_pool
    assert "2g.20gb" in mig_pool
    assert "another project" in mig_pool
    # the A100 nodes match no pool of the portal and say so
    assert "Nodes in no portal pool" in html
    assert 'id="node-gpu-a100-0"' in html


def test_cluster_page_links_the_other_tenants_own_jobs(held_cluster, personas, web_client_for):
    html = web_client_for(personas.outsider).get("/cluster/").content.decode()
    gpus = held_cluster["gpus"]
    assert f'href="/jobs/{held_cluster["theirs"].pk}/"' in gpu_cell(html, gpus[1]["uuid"])
    assert "another project" in gpu_cell(html, gpus[0]["uuid"])
    assert "alpha-train" not in html


def test_cluster_page_without_a_cluster_still_renders(personas, web_client_for, settings, tmp_path):
    from portal.kube.client import reset_api_client

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n"
    )
    settings.KUBECONFIG = str(kubeconfig)
    reset_api_client()
    kube_nodes.forget()
    try:
        response = web_client_for(personas.viewer).get("/cluster/")
    finally:
        kube_nodes.forget()
        reset_api_client()
    assert response.status_code == 200
    html = response.content.decode()
    assert "The cluster cannot be read right now" in html
    assert 'id="pool-h100"' in html


def test_cluster_page_needs_a_login(client):
    assert client.get("/cluster/").status_code == 302


# --- staff overview -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("outsider", 403),
        ("viewer", 403),
        ("member", 403),
        ("admin", 403),
        ("staff", 200),
    ],
)
def test_overview_is_for_staff_only(persona, status, personas, web_client_for):
    response = web_client_for(personas.by_name(persona)).get("/overview/")
    assert response.status_code == status
    assert (
        'href="/overview/"' in web_client_for(personas.by_name(persona)).get("/").content.decode()
    ) is (status == 200)


def test_overview_shows_capacity_quota_use_exchanges_waiting_and_idle(
    personas, web_client_for, make_job
):
    from datetime import timedelta

    from django.utils import timezone

    from gpumetrics.models import JobGpuSummary
    from jobs.models import Job, QueueUsage
    from tests.factories import ProjectQuotaFactory

    pool = personas.pool  # 1 node × 8 GPUs by default? read it back
    ProjectQuotaFactory(project=personas.project_a, pool=pool, resource="1g.10gb", nominal=7)
    QueueUsage.objects.create(
        queue_kind="clusterqueue",
        queue_name="gp-alpha",
        project=personas.project_a,
        pool="h100",
        resource="gpu",
        in_use=Decimal(10),
        guaranteed=Decimal(8),
        borrowed=Decimal(2),
    )
    QueueUsage.objects.create(
        queue_kind="clusterqueue",
        queue_name="gp-beta",
        project=personas.project_b,
        pool="h100",
        resource="gpu",
        in_use=Decimal(0),
        guaranteed=Decimal(2),
        lent=Decimal(2),
        pending_workloads=1,
    )
    old = make_job(
        personas.project_b,
        "waits-longest",
        state="queued",
        explanation=(
            "Waiting for 4 × H100 GPUs in pool h100: project beta uses 0 of its 2 guaranteed GPUs."
        ),
    )
    make_job(personas.project_a, "waits-less", state="queued")
    Job.objects.filter(pk=old.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    idle_job = make_job(personas.project_a, "sleepy", state="running")
    JobGpuSummary.objects.create(job=idle_job, util_mean=1.5, gpu_hours=2.0, idle=True)
    busy_job = make_job(personas.project_a, "busy", state="running")
    JobGpuSummary.objects.create(job=busy_job, util_mean=90.0, gpu_hours=2.0)

    html = web_client_for(personas.staff).get("/overview/").content.decode()
    pool_html = html[html.index('id="overview-h100"') : html.index('id="exchanges"')]
    assert f"{pool.total_gpus} GPUs" in pool_html
    assert "11 of" in pool_html  # 10 whole (8 + 2) + 1 GPU for seven 1g.10gb slices
    assert '<td class="num">10</td>' in pool_html  # whole GPUs in use (10 + 0)
    exchanges = html[html.index('id="exchanges"') : html.index('id="waiting"')]
    borrowing, lending = exchanges.split("<h3>Lending</h3>")
    assert 'href="/projects/alpha/"' in borrowing
    assert "beta" not in borrowing
    assert 'href="/projects/beta/"' in lending
    waiting = html[html.index('id="waiting"') : html.index('id="idle"')]
    assert waiting.index("waits-longest") < waiting.index("waits-less")
    assert "project beta uses 0 of its 2 guaranteed GPUs" in waiting
    assert "3\xa0hours" in waiting
    idle = html[html.index('id="idle"') :]
    assert "sleepy" in idle
    assert "busy" not in idle
    assert "1.5 %" in idle


def test_overview_empty_states_say_what_to_do(db, web_client_for):
    from tests.factories import UserFactory

    html = web_client_for(UserFactory(is_staff=True)).get("/overview/").content.decode()
    assert "Add the first pool" in html
    assert "No project borrows right now" in html
    assert "No job is waiting" in html
    assert "No running job sits idle" in html


# --- a user in no project; the project page's usage -----------------------------------------


def test_user_without_a_project_is_told_whom_to_ask(personas, web_client_for):
    from tests.factories import UserFactory

    personas.staff.email = "gpu-team@example.org"
    personas.staff.first_name, personas.staff.last_name = "Sam", "Staff"
    personas.staff.save()
    html = web_client_for(UserFactory(username="newbie")).get("/").content.decode()
    assert "You do not belong to any project yet" in html
    assert "<strong>newbie</strong>" in html
    assert "Sam Staff" in html
    assert 'href="mailto:gpu-team@example.org"' in html
    # someone in a project gets the projects instead
    assert "You do not belong" not in web_client_for(personas.viewer).get("/").content.decode()


def test_viewer_sees_everything_of_the_project_and_no_write_control(personas, web_client_for):
    html = web_client_for(personas.viewer).get("/projects/alpha/").content.decode()
    for section in ('class="quota-table"', "GPU-hours per user", 'id="members"', "CSV per user"):
        assert section in html
    forms = [chunk.split(">", 1)[0] for chunk in html.split("<form")[1:]]
    assert all('action="/accounts/logout/"' in form for form in forms), forms
    assert "<select" not in html
    assert "Remove" not in html


def test_another_tenants_project_and_its_usage_are_404(personas, web_client_for, api_client_for):
    assert web_client_for(personas.outsider).get("/projects/alpha/").status_code == 404
    url = "/api/v1/projects/alpha/usage/?group_by=user&format=csv"
    assert api_client_for(personas.outsider).get(url).status_code == 404


def test_project_usage_per_user_and_csv_export(personas, web_client_for, api_client_for, make_job):
    """Two hours of samples of a job of bob's, ended and rolled up: the project page's table
    and its CSV links give bob's GPU-hours."""
    import time

    from gpumetrics import services
    from gpumetrics.parsing import DeviceKey, DeviceReading
    from gpumetrics.series import FB_FREE, FB_USED, POWER, TENSOR, UTIL
    from jobs.services import job_transition

    job = make_job(personas.project_a, "csv-job")
    ns = personas.project_a.namespace
    now = int(time.time()) // 3600 * 3600
    for t in range(now - 2 * 3600, now, 60):
        reading = DeviceReading(
            key=DeviceKey("n1", "GPU-csv"),
            namespace=ns,
            pod=f"gp-job-{job.pk}-abcde",
            fields={UTIL: 50.0, TENSOR: 0.2, FB_USED: 100.0, FB_FREE: 900.0, POWER: 100.0},
        )
        services.ingest([reading], at=t)
    job_transition(job, to="succeeded", reason="Completed", source="test", expected_from="running")
    assert services.rollup_finished() == 1

    html = web_client_for(personas.viewer).get("/projects/alpha/").content.decode()
    table = html[html.index('class="usage-by-user"') :]
    table = table[: table.index("</table>")]
    assert "<td>bob</td>" in table
    assert "2.00" in table
    assert "1.00" in table
    assert "50.0 %" in table
    href = "/api/v1/projects/alpha/usage/?group_by=user&amp;format=csv"
    assert href in html
    csv_text = api_client_for(personas.viewer).get(href.replace("&amp;", "&")).content.decode()
    header, row = csv_text.strip().splitlines()
    assert header == "user,jobs,gpu_hours_held,gpu_hours_used,util_mean"
    user, jobs, held, used, _util = row.split(",")
    assert (user, jobs) == ("bob", "1")
    assert float(held) == pytest.approx(2.0, abs=0.02)
    assert float(used) == pytest.approx(1.0, abs=0.02)
    day_csv = (
        api_client_for(personas.viewer)
        .get("/api/v1/projects/alpha/usage/", {"group_by": "day", "format": "csv"})
        .content.decode()
    )
    assert day_csv.splitlines()[0].startswith("day,")
    assert sum(float(line.split(",")[2]) for line in day_csv.splitlines()[1:]) == pytest.approx(
        2.0, abs=0.02
    )


def test_project_without_usage_says_what_to_do(personas, web_client_for):
    member_html = web_client_for(personas.member).get("/projects/alpha/").content.decode()
    assert "No GPU-hours recorded yet" in member_html
    assert 'href="/jobs/new/"' in member_html
    viewer_html = web_client_for(personas.viewer).get("/projects/alpha/").content.decode()
    assert "No GPU-hours recorded yet" in viewer_html
    assert (
        'href="/jobs/new/"'
        not in viewer_html.split('id="members"')[0].split("GPU-hours per user")[1]
    )


# --- the admin console ----------------------------------------------------------------------


def test_admin_shows_current_use_beside_each_quota(personas, web_client_for):
    from jobs.models import QueueUsage
    from tests.factories import UserFactory

    QueueUsage.objects.create(
        queue_kind="clusterqueue",
        queue_name="gp-alpha",
        project=personas.project_a,
        pool="h100",
        resource="gpu",
        in_use=Decimal(3),
        guaranteed=Decimal(8),
    )
    superuser = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = web_client_for(superuser)
    listing = client.get("/admin/quotas/projectquota/").content.decode()
    assert "In use now" in listing
    assert '<td class="field-in_use">3 of 8</td>' in listing
    assert '<td class="field-in_use">—</td>' in listing  # beta: nothing reported yet
    change = client.get(f"/admin/tenants/project/{personas.project_a.pk}/change/").content.decode()
    assert "3 of 8" in change


def test_admin_chooses_members_by_name_with_autocomplete(personas, web_client_for):
    from tests.factories import UserFactory

    UserFactory(username="newcomer-nadia")
    superuser = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = web_client_for(superuser)
    change = client.get(f"/admin/tenants/project/{personas.project_a.pk}/change/").content.decode()
    assert "admin-autocomplete" in change
    found = client.get(
        "/admin/autocomplete/",
        {"term": "nadia", "app_label": "tenants", "model_name": "membership", "field_name": "user"},
    ).json()
    assert [r["text"] for r in found["results"]] == ["newcomer-nadia"]


def test_api_docs_link_back_to_the_portal(personas, web_client_for):
    html = web_client_for(personas.viewer).get("/api/docs/").content.decode()
    assert 'href="/"' in html
    assert "Back to the portal" in html
    assert 'id="swagger-ui"' in html


def test_project_admin_adds_a_member_by_e_mail_and_removal_asks_first(personas, web_client_for):
    from tenants.models import Membership
    from tests.factories import UserFactory

    UserFactory(username="nadia", email="Nadia@Example.org")
    client = web_client_for(personas.admin)
    html = client.get("/projects/alpha/").content.decode()
    assert 'hx-confirm="Remove bob from alpha?"' in html
    assert "Username or e-mail" in html
    response = client.post(
        "/projects/alpha/members/", {"user": "nadia@example.org", "role": "viewer"}
    )
    assert response.status_code == 302
    assert (
        Membership.objects.get(user__username="nadia", project=personas.project_a).role == "viewer"
    )
    UserFactory(username="twin-1", email="twin@example.org")
    UserFactory(username="twin-2", email="twin@example.org")
    ambiguous = client.post("/projects/alpha/members/", {"user": "twin@example.org"})
    assert ambiguous.status_code == 400
    body = ambiguous.content.decode()
    # the error sits in the field's own block, next to the input
    field = body[body.index('<div class="field has-error">') :]
    field = field[: field.index("</div>")]
    assert 'name="user"' in field
    assert "Several users have the e-mail" in field


def test_a_refused_role_change_is_shown_in_that_members_row(personas, web_client_for):
    from tenants.models import Membership

    alice = Membership.objects.get(project=personas.project_a, user=personas.admin)
    response = web_client_for(personas.admin).post(
        f"/projects/alpha/members/{alice.pk}/role/", {"role": "viewer"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    html = response.content.decode()
    row = html[html.index('id="member-alice"') :]
    row = row[: row.index("</tr>")]
    assert "last admin" in row
    assert html.count('class="error"') == 1

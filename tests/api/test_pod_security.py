"""Pod Security per project: restricted (the project's own non-root uid/gid) or baseline (root
allowed), the site default for new projects from a setting, the namespace label and the pod
templates following the project's choice, and the choice shown in the admin and on the page."""

import itertools

import pytest

from jobs.manifests import build_job_manifests
from tenants.models import PROJECT_UID_BASE, PROJECT_UID_BLOCK, project_uid_range
from tests.jobs.test_manifests import spec

RESTRICTED_POD = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}


def _pod_templates(objects: list[dict]) -> list[dict]:
    templates = []
    for obj in objects:
        if obj["kind"] != "Job":
            continue
        if obj["apiVersion"] == "batch/v1":
            templates.append(obj["spec"]["template"]["spec"])
        else:
            templates += [task["template"]["spec"] for task in obj["spec"]["tasks"]]
    return templates


def test_uid_ranges_are_deterministic_and_never_overlap():
    ranges = [project_uid_range(pk) for pk in range(1, 2000)]
    assert ranges[0] == range(PROJECT_UID_BASE + PROJECT_UID_BLOCK, PROJECT_UID_BASE + 20_000)
    assert project_uid_range(7) == project_uid_range(7)
    for before, after in itertools.pairwise(ranges):
        assert before.stop <= after.start
    assert ranges[-1].stop - 1 <= 2**31 - 1
    with pytest.raises(ValueError, match="no uid range"):
        project_uid_range(200_000)  # past what a 31-bit uid can hold
    with pytest.raises(ValueError, match="no uid range"):
        project_uid_range(0)


@pytest.mark.parametrize(
    "overrides",
    [
        {"kind": "single"},
        {"kind": "mig", "gpus": 0, "mig_resource": "nvidia.com/mig-1g.10gb"},
        {"kind": "gang", "replicas": 3, "backend": "kueue"},
        {"kind": "gang", "replicas": 3, "backend": "volcano"},
    ],
    ids=["single", "mig", "gang-kueue", "gang-volcano"],
)
def test_restricted_pods_run_as_the_project_uid_and_baseline_as_the_image_user(overrides):
    uid = project_uid_range(3).start
    restricted = _pod_templates(build_job_manifests(spec(run_as_uid=uid, **overrides)))
    assert restricted
    for pod in restricted:
        context = pod["securityContext"]
        assert set(context) == RESTRICTED_POD
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == uid
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for pod in _pod_templates(build_job_manifests(spec(**overrides))):
        assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}


@pytest.mark.django_db
def test_new_projects_take_the_site_default(settings):
    from tests.factories import ProjectFactory

    assert ProjectFactory(slug="one").pod_security == "restricted"
    settings.PORTAL_DEFAULT_POD_SECURITY = "baseline"
    assert ProjectFactory(slug="two").pod_security == "baseline"


@pytest.mark.django_db
def test_the_project_choice_reaches_the_namespace_and_the_pods(personas):
    from jobs.models import Job
    from jobs.selectors import job_manifests
    from quotas.manifests import namespace
    from quotas.sync import quota_model

    project = personas.project_a
    job = Job.objects.create(
        project=project,
        submitter=personas.member,
        name="train",
        kind="single",
        image="busybox",
        gpus=1,
        cpu="4",
        memory="16Gi",
        max_runtime_minutes=60,
        backend="kueue",
    )

    def enforced() -> str:
        (spec_,) = [p for p in quota_model().projects if p.slug == project.slug]
        return namespace(spec_)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]

    assert enforced() == "restricted"
    (pod,) = _pod_templates(job_manifests(job))
    assert pod["securityContext"]["runAsUser"] == project.run_as_uid
    assert project.run_as_uid == project_uid_range(project.pk).start

    project.pod_security = "baseline"
    project.save()
    job.refresh_from_db()
    assert enforced() == "baseline"
    (pod,) = _pod_templates(job_manifests(job))
    assert "runAsUser" not in pod["securityContext"]
    assert "runAsNonRoot" not in pod["securityContext"]


@pytest.mark.django_db
def test_project_page_and_admin_show_the_choice(personas, web_client_for):
    page = web_client_for(personas.viewer).get("/projects/alpha/")
    html = page.content.decode()
    assert "Pod Security <strong>restricted</strong>" in html
    assert str(personas.project_a.run_as_uid) in html

    staff = personas.staff
    staff.is_superuser = True
    staff.save()
    admin = web_client_for(staff)
    listing = admin.get("/admin/tenants/project/").content.decode()
    assert "column-pod_security" in listing
    change = admin.get(f"/admin/tenants/project/{personas.project_a.pk}/change/")
    assert 'name="pod_security"' in change.content.decode()
    assert str(personas.project_a.run_as_uid) in change.content.decode()


@pytest.mark.django_db
def test_the_api_shows_the_level_and_the_uid(personas, api_client_for):
    body = api_client_for(personas.viewer).get("/api/v1/projects/alpha/").json()
    assert body["pod_security"] == "restricted"
    assert body["run_as_uid"] == project_uid_range(personas.project_a.pk).start

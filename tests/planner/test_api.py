"""The planner's API: the forecast, the dry run's forecast, pending advice and the what-if."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.planner.conftest import make_job

FORECAST = "/api/v1/forecast/"
WHATIF = "/api/v1/whatif/"

pytestmark = pytest.mark.django_db


def query(**fields):
    return {"project": "alpha", "kind": "single", "gpus": 1, **fields}


def test_an_idle_cluster_starts_now(personas, api_client_for):
    response = api_client_for(personas.member).get(FORECAST, query())
    assert response.status_code == 200, response.content
    forecast = response.json()["forecast"]
    assert forecast["starts_now"] is True
    assert forecast["text"] == "now"
    assert forecast["pool"] == "h100"


def test_a_full_quota_gives_a_range_until_the_running_job_ends(
    personas, api_client_for, busy_alpha
):
    forecast = api_client_for(personas.member).get(FORECAST, query()).json()["forecast"]
    assert forecast["starts_now"] is False
    # No history: it ends between a quarter of its 60 minutes (10 min from now) and all of them.
    assert 54 * 60 <= forecast["high_seconds"] <= 55 * 60
    assert 9 * 60 <= forecast["low_seconds"] <= 10 * 60
    assert forecast["text"] == "likely to start in 5–55 min"


def test_the_late_end_expects_the_last_hours_higher_priority_submissions_again(
    personas, api_client_for, busy_alpha, settings
):
    from django.utils import timezone

    from quotas.models import PriorityClass

    # No class preemptible: an expected high-priority job waits for the running one to end
    # (55 min from now), then goes before the probe.
    PriorityClass.objects.update(preemptible=False)
    now = timezone.now()
    client = api_client_for(personas.member)
    # A high-priority 8-GPU job two hours ago is outside the window: the range is unchanged.
    make_job(
        personas,
        name="old-high",
        state="succeeded",
        created=now - timedelta(hours=2),
        gpus=8,
        priority="high",
        max_runtime_minutes=30,
    )
    unchanged = client.get(FORECAST, query()).json()["forecast"]
    assert 54 * 60 <= unchanged["high_seconds"] <= 55 * 60
    make_job(
        personas,
        name="recent-high",
        state="succeeded",
        created=now - timedelta(minutes=20),
        gpus=8,
        priority="high",
        max_runtime_minutes=30,
    )
    later = client.get(FORECAST, query()).json()["forecast"]
    assert later["high_seconds"] >= unchanged["high_seconds"] + 25 * 60  # after its 30 min
    # The early end expects nothing new (seconds pass between the requests).
    assert abs(later["low_seconds"] - unchanged["low_seconds"]) <= 5
    settings.PORTAL_FORECAST_ARRIVAL_WINDOW_MINUTES = 0
    off = client.get(FORECAST, query()).json()["forecast"]
    assert abs(off["high_seconds"] - unchanged["high_seconds"]) <= 5


def test_the_submitters_history_narrows_the_range(personas, api_client_for, busy_alpha):
    from django.utils import timezone

    now = timezone.now()
    for index, minutes in enumerate((20, 22, 25, 21)):
        ended = now - timedelta(days=1, hours=index)
        make_job(
            personas,
            name=f"past-{index}",
            state="succeeded",
            created=ended - timedelta(minutes=minutes + 1),
            started=ended - timedelta(minutes=minutes),
            ended=ended,
            gpus=8,
        )
    forecast = api_client_for(personas.member).get(FORECAST, query()).json()["forecast"]
    # Similar 8-GPU runs took 20-25 minutes: the running one (5 min in) ends in ~15-20 min.
    assert 14 * 60 <= forecast["low_seconds"] <= forecast["high_seconds"] <= 20 * 60


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"gpus": "many"}, "gpus"),
        ({"kind": "quantum"}, "kind"),
        ({"priority": "urgent"}, "priority"),
        ({"gpus": 99}, "gpus"),
        ({"project": "nope"}, "project"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(personas, api_client_for, params, field):
    response = api_client_for(personas.member).get(FORECAST, query(**params))
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()


def test_another_tenants_project_is_refused_like_a_missing_one(personas, api_client_for):
    response = api_client_for(personas.outsider).get(FORECAST, query())
    assert response.status_code == 400
    assert "project" in response.json()["errors"]


def test_the_dry_run_answers_with_its_forecast(personas, api_client_for, busy_alpha):
    body = {"project": "alpha", "kind": "single", "gpus": 1, "image": "busybox"}
    response = api_client_for(personas.member).post(
        "/api/v1/jobs/?dry_run=true", body, format="json"
    )
    assert response.status_code == 200
    assert response.json()["forecast"]["high_seconds"] > 50 * 60
    invalid = api_client_for(personas.member).post(
        "/api/v1/jobs/?dry_run=true", {**body, "gpus": 99}, format="json"
    )
    assert invalid.json()["forecast"] is None


def test_advice_offers_a_mig_slice_that_starts_now(personas, api_client_for, busy_alpha):
    from django.utils import timezone

    waiting = make_job(personas, name="small", state="queued", created=timezone.now(), gpus=1)
    response = api_client_for(personas.member).get(f"/api/v1/jobs/{waiting.pk}/advice/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["forecast"]["starts_now"] is False
    slices = [a for a in body["alternatives"] if a["changes"].get("mig_profile") == "1g.10gb"]
    assert slices, body["alternatives"]
    assert slices[0]["forecast"]["starts_now"] is True
    assert slices[0]["text"] == "a 1g.10gb MIG slice: starts now"
    # 3g.40gb: the pool offers it but alpha has no quota for it, so it is never advised.
    assert not [a for a in body["alternatives"] if a["changes"].get("mig_profile") == "3g.40gb"]


def test_advice_never_offers_what_the_members_gpu_limit_forbids(
    personas, api_client_for, busy_alpha
):
    from django.utils import timezone

    from governance.models import MemberGpuLimit
    from jobs.models import Job

    # The member already holds 8 GPUs (the running job, sent to the cluster) of an 8-GPU limit:
    # a slice would wait in the portal, so it is not advised.
    Job.objects.filter(pk=busy_alpha.pk).update(applied_at=timezone.now())
    MemberGpuLimit.objects.create(
        project=personas.project_a, pool=personas.pool, user=personas.member, max_gpus=8
    )
    waiting = make_job(personas, name="small", state="queued", created=timezone.now(), gpus=1)
    body = api_client_for(personas.member).get(f"/api/v1/jobs/{waiting.pk}/advice/").json()
    assert body["forecast"]["starts_now"] is False
    assert body["alternatives"] == []


def test_advice_names_a_later_start_window(personas, api_client_for, busy_alpha):
    from django.utils import timezone

    # The 8-GPU run holds the pool for another 55 minutes (its maximum runtime, no history):
    # submitted then, the same request starts at once.
    waiting = make_job(personas, name="small", state="queued", created=timezone.now(), gpus=1)
    body = api_client_for(personas.member).get(f"/api/v1/jobs/{waiting.pk}/advice/").json()
    assert abs(body["later"]["after_seconds"] - 55 * 60) <= 60
    assert body["later"]["text"].startswith("submitted in 55 min or later")


def test_advice_of_another_tenants_job_is_a_404(personas, api_client_for, busy_alpha):
    response = api_client_for(personas.outsider).get(f"/api/v1/jobs/{busy_alpha.pk}/advice/")
    assert response.status_code == 404


def test_a_viewer_gets_the_forecast_but_no_alternatives(personas, api_client_for, busy_alpha):
    from django.utils import timezone

    waiting = make_job(personas, name="small", state="queued", created=timezone.now(), gpus=1)
    body = api_client_for(personas.viewer).get(f"/api/v1/jobs/{waiting.pk}/advice/").json()
    assert body["forecast"] is not None
    assert body["alternatives"] == []


# --- what-if --------------------------------------------------------------------------------------
def test_the_whatif_is_for_staff_only(personas, api_client_for):
    assert api_client_for(personas.admin).post(WHATIF, {}, format="json").status_code == 403
    response = api_client_for(personas.staff).post(WHATIF, {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["jobs"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quotas": [{"project": "alpha", "pool": "h100", "nominal": -1}]}, "quotas.0.nominal"),
        ({"quotas": [{"project": "nope", "pool": "h100", "nominal": 1}]}, "quotas.0.project"),
        ({"quotas": [{"project": "alpha", "pool": "nope", "nominal": 1}]}, "quotas.0.pool"),
        (
            {"quotas": [{"project": "alpha", "pool": "h100", "resource": "7g.99gb", "nominal": 1}]},
            "quotas.0.resource",
        ),
        ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "end"),
        ({"start": "yesterday"}, "start"),
    ],
)
def test_whatif_bad_input_is_a_400_naming_the_field(personas, api_client_for, body, field):
    response = api_client_for(personas.staff).post(WHATIF, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()


def test_apply_sets_the_quota_through_the_quota_service(personas, api_client_for):
    from quotas.models import ProjectQuota

    body = {"quotas": [{"project": "alpha", "pool": "h100", "nominal": 6, "borrowing_limit": 2}]}
    assert api_client_for(personas.admin).post(
        WHATIF + "apply/", body, format="json"
    ).status_code == (403)
    response = api_client_for(personas.staff).post(WHATIF + "apply/", body, format="json")
    assert response.status_code == 200, response.content
    quota = ProjectQuota.objects.get(project=personas.project_a, pool=personas.pool, resource="gpu")
    assert (quota.nominal, quota.borrowing_limit) == (6, 2)


def alpha_whatif(personas, api_client_for, start, *, nominal: int) -> dict:
    """Staff's what-if from ``start`` until now with alpha's guarantee set to ``nominal`` (no
    borrowing): alpha's row."""
    from django.utils import timezone

    body = {
        "start": start.isoformat(),
        "end": timezone.now().isoformat(),
        "quotas": [{"project": "alpha", "pool": "h100", "nominal": nominal, "borrowing_limit": 0}],
    }
    response = api_client_for(personas.staff).post(WHATIF, body, format="json")
    assert response.status_code == 200, response.content
    return next(p for p in response.json()["projects"] if p["project"] == "alpha")


def test_a_month_replayed_shows_the_p90_wait_falling_when_the_quota_rises(personas, api_client_for):
    """A generated month: alpha submits a 2-GPU job every 30 minutes, each runs 2 hours, on a
    guarantee of 2 GPUs without borrowing: a queue builds. With 8 GPUs it keeps up."""
    from django.utils import timezone

    from quotas.models import ProjectQuota

    ProjectQuota.objects.filter(project=personas.project_a).update(nominal=2, borrowing_limit=0)
    start = timezone.now() - timedelta(days=30)
    for index in range(120):
        created = start + timedelta(hours=6 * (index // 12), minutes=30 * (index % 12))
        began = created + timedelta(minutes=30 * (index % 12))  # roughly what really happened
        make_job(
            personas,
            name=f"m-{index}",
            state="succeeded",
            created=created,
            started=began,
            ended=began + timedelta(hours=2),
            gpus=2,
        )
    alpha = alpha_whatif(personas, api_client_for, start, nominal=8)
    today, proposed = alpha["current_quotas"], alpha["proposed_quotas"]
    assert today["jobs"] == proposed["jobs"] == 120
    # Twelve 2-hour jobs every six hours on 2 GPUs: the last waits 22 hours; on 8 GPUs, 4.
    assert today["wait_p90_seconds"] > 15 * 3600
    assert proposed["wait_p90_seconds"] <= 4 * 3600
    assert proposed["wait_p90_seconds"] < today["wait_p90_seconds"]
    # Every job ran, either way: the same GPU-hours served.
    assert today["gpu_hours"] == pytest.approx(proposed["gpu_hours"], rel=0.01)
    assert ProjectQuota.objects.get(project=personas.project_a, resource="gpu").nominal == 2


def test_the_whatif_places_a_gangs_pods_node_by_node(personas, api_client_for):
    """A 2 × 8-GPU gang on a pool of 8-GPU nodes: each pod takes a node, so the replay starts
    it (as one 16-GPU pod it would fit no node and never start)."""
    from django.utils import timezone

    from jobs.models import Job

    start = timezone.now() - timedelta(days=2)
    gang = make_job(
        personas,
        name="gang",
        state="succeeded",
        created=start + timedelta(hours=1),
        started=start + timedelta(hours=1, minutes=1),
        ended=start + timedelta(hours=3),
        gpus=8,
        kind="gang",
    )
    Job.objects.filter(pk=gang.pk).update(replicas=2)
    alpha = alpha_whatif(personas, api_client_for, start, nominal=16)
    # today alpha may hold 12 GPUs at most: never; with 16 guaranteed it runs, a pod per node
    assert alpha["current_quotas"]["not_started"] == 1
    proposed = alpha["proposed_quotas"]
    assert (proposed["jobs"], proposed["not_started"]) == (1, 0)
    assert proposed["gpu_hours"] == pytest.approx(16 * 2, rel=0.05)

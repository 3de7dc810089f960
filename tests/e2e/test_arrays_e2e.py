"""End to end: a 12-element sweep through the REST API, a real Celery worker (with beat) and
kubesim: at most `parallelism` elements in the cluster, per-element states and counts on the
array's API object and page, and cancel stops the rest (nothing more is applied, what ran is
deleted)."""

import pytest

from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
NS = "gp-alpha"


def api_as(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


def cluster_jobs():
    """{element index: batch Job} of what the portal has in the cluster."""
    from jobs.models import Job
    from portal.kube import apply as kube

    by_id = {
        int(j["metadata"]["labels"]["gpu-portal.io/job-id"]): j
        for j in kube.list_owned("batch/v1", "Job", namespace=NS)
        if not j["metadata"].get("deletionTimestamp")
    }
    indices = dict(Job.objects.filter(pk__in=by_id).values_list("pk", "array_index"))
    return {indices[pk]: job for pk, job in by_id.items() if pk in indices}


def test_a_12_element_sweep_shows_per_element_states_and_cancel_stops_the_rest(
    e2e_org, worker_factory
):
    from portal.kube import apply as kube
    from quotas.tasks import sync_quotas

    worker_factory(beat_seconds=1)
    sync_quotas.delay()
    wait_for(
        lambda: kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "gp-alpha", "gp-alpha"),
        timeout=90,
        what="the quota objects in kubesim",
    )
    client = api_as(e2e_org["bob"])
    # Indices 0-5 sleep 5 simulated seconds, 6-11 a day: six finish, the rest keep running.
    response = client.post(
        "/api/v1/jobs/",
        {
            "project": "alpha",
            "name": "grid",
            "kind": "single",
            "gpus": 1,
            "image": IMAGE,
            "command": ["sh", "-c", "sleep $SWEEP_SECS"],
            "sweep": {"secs": [5, 36000], "lr": [0.1, 0.03, 0.01, 0.003, 0.001, 0.0003]},
            "parallelism": 4,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    array = response.json()
    assert (array["count"], array["parallelism"]) == (12, 4)
    url = f"/api/v1/arrays/{array['id']}/"

    seen_in_cluster: set[int] = set()

    def six_done_and_four_running():
        in_cluster = cluster_jobs()
        seen_in_cluster.update(in_cluster)
        active_in_cluster = [
            e
            for e in client.get(url).json()["elements"]["results"]
            if e["applied"] and not e["is_terminal"]
        ]
        # Parallelism: never more than 4 unfinished elements in the cluster.
        assert len(active_in_cluster) <= 4, active_in_cluster
        counts = client.get(url).json()["counts"]
        return counts["succeeded"] == 6 and counts["running"] == 4 and counts

    counts = wait_for(
        six_done_and_four_running, timeout=240, interval=0.5, what="6 done, 4 running"
    )
    assert (counts["held"], counts["active"], counts["total"]) == (2, 6, 12)
    elements = {e["index"]: e for e in client.get(url).json()["elements"]["results"]}
    assert all(elements[i]["state"] == "succeeded" for i in range(6))
    held = [i for i, e in elements.items() if not e["applied"]]
    assert len(held) == 2
    assert all(elements[i]["state"] == "submitted" for i in held)
    assert elements[7]["params"] == {"secs": 36000, "lr": 0.03}
    running = [i for i, e in elements.items() if e["state"] == "running"]
    env = {
        e["name"]: e["value"]
        for e in cluster_jobs()[running[0]]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["ARRAY_INDEX"] == str(running[0])
    assert env["SWEEP_SECS"] == "36000"

    page = client.get(f"/jobs/arrays/{array['id']}/").content.decode()
    for i in running:
        assert f'data-index="{i}" data-state="running"' in page

    cancelled = client.post(f"{url}cancel/")
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["counts"]["cancelled"] == 6
    assert cancelled.json()["counts"]["succeeded"] == 6
    wait_for(lambda: not cluster_jobs().keys() & set(running), timeout=90, what="running deleted")
    # The held ones never reach the cluster, however many resyncs and passes run meanwhile.
    wait_for(lambda: client.get(url).json()["counts"]["active"] == 0, what="nothing active")
    final = {e["index"]: e for e in client.get(url).json()["elements"]["results"]}
    assert {final[i]["state"] for i in range(6, 12)} == {"cancelled"}
    assert not set(held) & seen_in_cluster
    assert not set(held) & cluster_jobs().keys()

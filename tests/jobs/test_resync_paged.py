"""The resync reads the cluster in pages (limit/continue) against kubesim: every job of a
namespace is still seen when its objects span several pages, a namespace costs a few LISTs,
and the sweep finds orphans on any page."""

import pytest

from tests.jobs.kubesim_org import count_owned, reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


class ListSpy:
    """Records the GETs the portal's kube layer sends (passing every call through)."""

    def __init__(self, monkeypatch):
        from portal.kube import apply as kube

        self.calls: list[tuple[str, dict[str, str]]] = []
        real = kube._call_raw

        def recording(method, path, **kwargs):
            if method == "GET":
                self.calls.append((path, dict(kwargs.get("query") or [])))
            return real(method, path, **kwargs)

        monkeypatch.setattr(kube, "_call_raw", recording)

    def pages(self, suffix: str) -> list[dict[str, str]]:
        return [query for path, query in self.calls if path.endswith(suffix)]


def test_a_namespace_read_in_small_pages_still_sees_every_job(org, settings, monkeypatch):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile, resync_jobs

    ns = org["project"].namespace
    jobs = [submit(org, kind="single", gpus=1, command=["sleep", "3600"]) for _ in range(5)]
    for job in jobs:
        assert job_reconcile(job_id=job.pk) == "applied"
    for job in jobs:
        reconcile_until(job, {"queued", "admitted", "running"})
    settings.PORTAL_KUBE_LIST_PAGE_SIZE = 2
    spy = ListSpy(monkeypatch)
    enqueued: list[int] = []

    counts = resync_jobs(enqueue=enqueued.append)

    # Had the pages after the first been dropped, jobs would look missing and be re-applied.
    assert enqueued == [], counts
    assert counts["unchanged"] + counts["moved"] == 5
    batch_pages = spy.pages(f"/namespaces/{ns}/jobs")
    assert len(batch_pages) == 3  # 5 Jobs, 2 a page
    assert all(q["limit"] == "2" for q in batch_pages)
    assert [("continue" in q) for q in batch_pages] == [False, True, True]
    per_namespace = [path for path, _ in spy.calls if f"/namespaces/{ns}/" in path]
    assert len(per_namespace) <= 8, per_namespace  # a few LIST pages, not one call per job
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) <= {
        "queued",
        "admitted",
        "running",
    }


def test_the_sweep_finds_an_orphan_on_a_later_page(org, settings):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile, resync_jobs
    from jobs.selectors import job_manifests
    from portal.kube import apply as kube

    ns = org["project"].namespace
    # Forgotten first: a job id above every id the portal has handed out is never swept.
    forgotten = submit(org, kind="single", gpus=1, command=["sleep", "3600"])
    manifests = job_manifests(forgotten)
    Job.objects.filter(pk=forgotten.pk).delete()
    live = [submit(org, kind="single", gpus=1, command=["sleep", "3600"]) for _ in range(4)]
    for job in live:
        assert job_reconcile(job_id=job.pk) == "applied"
    for manifest in manifests:
        kube.apply(manifest)
    settings.PORTAL_KUBE_LIST_PAGE_SIZE = 2

    counts = resync_jobs(enqueue=lambda _job_id: None)

    assert count_owned("Job", "batch/v1", ns, forgotten.pk) == 0
    assert counts["swept"] == 1, counts
    assert all(count_owned("Job", "batch/v1", ns, job.pk) == 1 for job in live)

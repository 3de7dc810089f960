"""The job page's log tail: an HTML fragment (escaped by the template) that polls itself while
the job runs. The live-pages work may switch it to server-sent events."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.shortcuts import get_object_or_404, render
from django.views import View

from jobs.logs import selectors as job_logs
from jobs.selectors import job_list_visible_to

TAIL_LINES = 50


class JobLogTailView(LoginRequiredMixin, View):
    def get(self, request, pk: int):
        job = get_object_or_404(job_list_visible_to(user=request.user), pk=pk)
        text, note, pod = "", "", None
        try:
            pod = job_logs.choose_pod(job)
            text = b"".join(job_logs.stream(job, pod, tail=TAIL_LINES)).decode("utf-8", "replace")
        except job_logs.LogsUnavailable as exc:
            note = str(exc)
        except Exception:
            note = "The logs cannot be read right now."
        return render(
            request,
            "jobs/partials/log_tail.html",
            {"job": job, "text": text, "note": note, "pod": pod, "lines": TAIL_LINES},
        )

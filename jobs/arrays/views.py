"""HTML pages of a job array: its elements with their states and counts, and cancel."""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from jobs.arrays.selectors import array_counts, array_elements, array_list_visible_to
from jobs.arrays.services import NothingToDo, array_cancel
from jobs.states import JobState
from tenants.permissions import can_write

PAGE_SIZE = 100


def _visible_array(request, pk: int):
    return get_object_or_404(array_list_visible_to(user=request.user), pk=pk)


class ArrayDetailView(LoginRequiredMixin, View):
    def get(self, request, pk: int):
        array = _visible_array(request, pk)
        elements = array_elements(array=array).select_related("project")
        counts = array_counts(array=array)
        context = {
            "array": array,
            "counts": counts,
            "state_counts": [(JobState(s).label, s, counts[s]) for s in JobState.values],
            "page": Paginator(elements, PAGE_SIZE).get_page(request.GET.get("page")),
            "can_write": can_write(request.user, array.project),
        }
        return render(request, "jobs/array_detail.html", context)


class ArrayCancelView(LoginRequiredMixin, View):
    def post(self, request, pk: int):
        array = _visible_array(request, pk)
        try:
            n = array_cancel(actor=request.user, array=array, source="ui")
            messages.success(request, f"Cancelled {n} elements of {array.name}.")
        except NothingToDo as exc:
            messages.error(request, str(exc))
        except PermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return redirect("job-array-detail", pk=array.pk)

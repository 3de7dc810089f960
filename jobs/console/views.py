"""The console pages: the cluster (pools → nodes → GPUs and who holds them), for every signed-in
user, and the staff overview (capacity, quotas, use, borrowing, waiting and idle jobs).

Thin views: one selector each (jobs.console.cluster_map, jobs.console.overview)."""

from __future__ import annotations

from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View

from jobs.console.cluster_map import cluster_map_for
from jobs.console.overview import exchanges, idle_allocations, longest_waiting, pool_overview
from tenants.permissions import is_staff


class ClusterView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return render(
            request, "console/cluster.html", {"cluster": cluster_map_for(user=request.user)}
        )


class OverviewView(LoginRequiredMixin, UserPassesTestMixin, View):
    """Staff only: it names every project (others get the 403 page)."""

    raise_exception = True

    def test_func(self) -> bool:
        return is_staff(self.request.user)

    def get(self, request: HttpRequest) -> HttpResponse:
        borrowers, lenders = exchanges()
        context = {
            "pools": pool_overview(),
            "borrowers": borrowers,
            "lenders": lenders,
            "waiting": longest_waiting(),
            "idle": idle_allocations(),
        }
        return render(request, "console/overview.html", context)

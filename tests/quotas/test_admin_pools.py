"""The admin console for GPU pools, quotas, department caps and priority classes."""

import pytest

from quotas import services
from quotas.models import DepartmentQuota, GpuPool, PriorityClass


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


def _pool_post(**overrides) -> dict[str, str]:
    data = {
        "slug": "a100b",
        "name": "A100 B",
        "gpu_model": "NVIDIA A100-SXM4-40GB",
        "node_count": "2",
        "gpus_per_node": "8",
        "node_labels": "{}",
        "mig_profiles": "",
        "default_cpu": "8",
        "default_memory": "64Gi",
    }
    data.update(overrides)
    return data


def test_add_pool_with_node_labels_left_empty_selects_by_product(org, staff_client):
    response = staff_client.post("/admin/quotas/gpupool/add/", _pool_post(node_labels=""))
    assert response.status_code == 302
    pool = GpuPool.objects.get(slug="a100b")
    assert pool.node_labels == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


def test_add_pool_normalises_the_model_and_parses_profiles(org, staff_client):
    response = staff_client.post(
        "/admin/quotas/gpupool/add/", _pool_post(mig_profiles="3g.20gb, 1g.5gb  2g.10gb")
    )
    assert response.status_code == 302
    pool = GpuPool.objects.get(slug="a100b")
    assert pool.gpu_model == "NVIDIA-A100-SXM4-40GB"
    assert pool.mig_profiles == ["1g.5gb", "2g.10gb", "3g.20gb"]
    assert pool.node_labels == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    change_page = staff_client.get(f"/admin/quotas/gpupool/{pool.pk}/change/").content.decode()
    assert 'value="1g.5gb, 2g.10gb, 3g.20gb"' in change_page


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (
            {"mig_profiles": "3g.40gb"},
            "3g.40gb is not a MIG profile of NVIDIA-A100-SXM4-40GB; valid profiles: 1g.5gb, "
            "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb.",
        ),
        (
            {"gpu_model": "NVIDIA-L40S", "mig_profiles": "1g.10gb"},
            "NVIDIA-L40S does not support MIG; leave the MIG profiles empty.",
        ),
        ({"mig_profiles": "1g.5gb, 1g.5gb"}, "MIG profiles listed twice: 1g.5gb."),
        ({"node_labels": "{not json"}, "Enter a valid JSON."),
        ({"node_labels": '["a"]'}, "Node labels must be a JSON object"),
        ({"node_labels": '{"nvidia.com/gpu.product": "has spaces"}'}, "must be at most 63"),
        ({"node_count": "-1"}, "Ensure this value is greater than or equal to 0."),
        ({"gpus_per_node": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"slug": "A100"}, "DNS-1123 label"),
        ({"slug": "h100"}, "Gpu pool with this Slug already exists."),
        ({"gpu_model": ""}, "This field is required."),
        ({"gpu_model": "A100-" + "x" * 94}, "at most 100 characters"),
    ],
)
def test_add_pool_with_bad_input_gets_a_field_error(org, staff_client, overrides, fragment):
    response = staff_client.post("/admin/quotas/gpupool/add/", _pool_post(**overrides))
    assert response.status_code == 200
    content = response.content.decode()
    assert "errorlist" in content
    assert fragment in content
    assert GpuPool.objects.count() == 2


def test_removing_a_profile_in_use_is_refused(org, staff_client):
    services.quota_set(actor=None, project=org.vision, pool=org.h100, resource="2g.20gb", nominal=3)
    data = _pool_post(
        slug="h100",
        gpu_model=org.h100.gpu_model,
        node_count="4",
        mig_profiles="1g.10gb",
        node_labels='{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}',
    )
    response = staff_client.post(f"/admin/quotas/gpupool/{org.h100.pk}/change/", data)
    assert response.status_code == 200
    assert "Quotas still use profiles this change removes: 2g.20gb (used by vision)." in (
        response.content.decode()
    )
    org.h100.refresh_from_db()
    assert org.h100.mig_profiles == ["1g.10gb", "2g.20gb"]


def test_pool_pages_warn_when_over_subscribed(org, staff_client):
    services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=30)
    page = staff_client.get("/admin/quotas/gpupool/").content.decode()
    assert "30 of 32 GPUs guaranteed" in page
    assert "over-subscribed" not in page
    services.quota_set(actor=None, project=org.infra, pool=org.h100, resource="1g.10gb", nominal=15)
    expected = (
        "Pool h100 is over-subscribed: 33 of 32 GPUs guaranteed (30 whole, 3 for MIG: "
        "1g.10gb ×15); its nominal quotas need 1 GPU(s) more than the pool has"
    )
    list_page = staff_client.get("/admin/quotas/gpupool/").content.decode()
    assert "⚠ over-subscribed by 1 GPU(s)" in list_page
    assert expected in list_page
    change_page = staff_client.get(f"/admin/quotas/gpupool/{org.h100.pk}/change/")
    assert expected in change_page.content.decode()


def test_department_quota_add_is_validated(org, staff_client):
    services.quota_set(actor=None, project=org.vision, pool=org.a100, nominal=6)
    data = {
        "department": str(org.research.pk),
        "pool": str(org.a100.pk),
        "resource": "gpu",
        "limit": "5",
    }
    response = staff_client.post("/admin/quotas/departmentquota/add/", data)
    assert response.status_code == 200
    assert "already hold 6 GPUs in pool a100; the cap must be at least 6 (got 5)." in (
        response.content.decode()
    )
    data["limit"] = "6"
    assert staff_client.post("/admin/quotas/departmentquota/add/", data).status_code == 302
    page = staff_client.get("/admin/quotas/departmentquota/").content.decode()
    assert '<td class="field-held">6</td>' in page
    assert "0 left" in page
    assert DepartmentQuota.objects.get().limit == 6


def test_project_quota_add_names_valid_profiles(org, staff_client):
    data = {
        "project": str(org.vision.pk),
        "pool": str(org.a100.pk),
        "resource": "1g.10gb",
        "nominal": "1",
        "borrowing_limit": "",
    }
    response = staff_client.post("/admin/quotas/projectquota/add/", data)
    assert response.status_code == 200
    assert "Pool a100 does not offer the MIG profile 1g.10gb; it offers: gpu." in (
        response.content.decode()
    )


def test_priority_classes_can_be_tuned_but_not_added_or_removed(db, staff_client):
    normal = PriorityClass.objects.get(name="normal")
    assert staff_client.get("/admin/quotas/priorityclass/add/").status_code == 403
    assert staff_client.get(f"/admin/quotas/priorityclass/{normal.pk}/delete/").status_code == 403
    data = {"value": "200", "preemptible": "on", "description": "tuned"}
    response = staff_client.post(f"/admin/quotas/priorityclass/{normal.pk}/change/", data)
    assert response.status_code == 302
    normal.refresh_from_db()
    assert (normal.value, normal.preemptible, normal.description) == (200, True, "tuned")
    response = staff_client.post(
        f"/admin/quotas/priorityclass/{normal.pk}/change/", {"value": "lots"}
    )
    assert response.status_code == 200
    assert "Enter a whole number." in response.content.decode()


def test_saving_a_quota_that_over_subscribes_warns(org, staff_client):
    services.quota_set(actor=None, project=org.vision, pool=org.a100, nominal=16)
    data = {
        "project": str(org.infra.pk),
        "pool": str(org.a100.pk),
        "resource": "gpu",
        "nominal": "1",
        "borrowing_limit": "0",
    }
    response = staff_client.post("/admin/quotas/projectquota/add/", data, follow=True)
    assert "Pool a100 is over-subscribed: 17 of 16 GPUs guaranteed" in response.content.decode()

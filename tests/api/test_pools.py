"""/api/v1/pools/: the read-only GPU pool catalogue."""

from tests.factories import GpuPoolFactory


def test_pool_detail(personas, api_client_for):
    response = api_client_for(personas.outsider).get("/api/v1/pools/h100/")
    assert response.status_code == 200
    body = response.json()
    assert body["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
    assert body["total_gpus"] == 32
    assert body["mig_profiles"] == ["1g.10gb", "3g.40gb"]


def test_filter_by_gpu_model_ignores_case(personas, api_client_for):
    GpuPoolFactory(slug="a100", gpu_model="NVIDIA-A100-SXM4-40GB")
    response = api_client_for(personas.viewer).get(
        "/api/v1/pools/", {"gpu_model": "nvidia-a100-sxm4-40gb"}
    )
    assert [p["slug"] for p in response.json()["results"]] == ["a100"]


def test_pools_cannot_be_written(personas, api_client_for):
    client = api_client_for(personas.staff)
    response = client.post("/api/v1/pools/", {"slug": "x"}, format="json")
    assert response.status_code == 405
    assert response.json()["errors"] == {}
    assert client.delete("/api/v1/pools/h100/").status_code == 405


def test_pool_list_query_count(personas, api_client_for, django_assert_max_num_queries):
    for n in range(20):
        GpuPoolFactory(slug=f"bulk-{n}")
    client = api_client_for(personas.member)
    # One aggregation of the GPUs in use, whatever the number of pools.
    with django_assert_max_num_queries(5):
        response = client.get("/api/v1/pools/")
    assert response.json()["count"] == 21

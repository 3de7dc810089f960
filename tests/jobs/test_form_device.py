"""The submit form's "GPU by its attributes" field (DRA-managed pools): sent as the API's
`device`, its errors next to it, and "Submit again" filling it in."""

import html

import pytest

from tests.jobs.test_console_pages import field_block, form_data

pytestmark = pytest.mark.django_db

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def dra_pool(personas):
    from tests.factories import GpuPoolFactory, ProjectQuotaFactory

    pool = GpuPoolFactory(
        slug="dra",
        gpu_model=H100,
        node_labels={"nvidia.com/dra-driver-gpu.enabled": "true"},
        dra_managed=True,
    )
    ProjectQuotaFactory(project=personas.project_a, pool=pool, resource="gpu", nominal=2)
    return pool


def test_a_device_by_attributes_is_submitted_and_submit_again_fills_it_in(
    personas, dra_pool, web_client_for
):
    from jobs.models import Job

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/",
        form_data(name="big", pool="dra", device="min_memory=40Gi, architecture=Hopper"),
    )
    assert response.status_code == 302, response.content[:2000]
    job = Job.objects.get(name="big")
    assert job.device_request == {"min_memory": "40Gi", "architecture": "Hopper"}
    again = html.unescape(client.get(f"/jobs/new/?again={job.pk}").content.decode())
    assert 'value="min_memory=40Gi, architecture=Hopper"' in field_block(again, "device")


@pytest.mark.parametrize(
    ("device", "words"),
    [
        ("min_memory", "'min_memory' is not KEY=value"),
        ("min_memory=100Gi", "min_memory: can never run: the largest GPU in pool dra has"),
        ("colour=green", "colour:"),
    ],
)
def test_a_bad_device_is_refused_next_to_the_field(
    personas, dra_pool, web_client_for, device, words
):
    from jobs.models import Job

    response = web_client_for(personas.member).post(
        "/jobs/new/", form_data(name="big", pool="dra", device=device)
    )
    assert response.status_code == 400
    block = field_block(html.unescape(response.content.decode()), "device")
    assert "has-error" in block
    assert words in block
    assert not Job.objects.exists()


def test_a_device_on_a_pool_without_dra_says_so(personas, dra_pool, web_client_for):
    response = web_client_for(personas.member).post(
        "/jobs/new/", form_data(pool="h100", device="min_memory=40Gi")
    )
    assert response.status_code == 400
    assert "is not DRA-managed" in html.unescape(response.content.decode())

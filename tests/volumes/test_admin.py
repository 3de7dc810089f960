"""The admin console: approved storage classes, data volumes (through the services), pool caps."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(personas):
    from tests.factories import UserFactory

    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def staff_client(root, web_client_for):
    return web_client_for(root)


def test_staff_approve_a_storage_class_and_register_a_volume(
    personas, root, staff_client, django_capture_on_commit_callbacks
):
    from volumes.models import DataVolume, StorageClass

    for page in (
        "/admin/volumes/storageclass/",
        "/admin/volumes/storageclass/add/",
        "/admin/volumes/datavolume/",
        "/admin/volumes/datavolume/add/",
    ):
        assert staff_client.get(page).status_code == 200, page
    response = staff_client.post(
        "/admin/volumes/storageclass/add/", {"name": "fast-ssd", "max_size": "2Ti"}
    )
    assert response.status_code == 302
    storage = StorageClass.objects.get(name="fast-ssd")

    form = {
        "project": personas.project_a.pk,
        "name": "scratch",
        "kind": "new",
        "claim_name": "",
        "storage_class": storage.pk,
        "size": "3Ti",
        "nfs_server": "",
        "nfs_path": "",
        "mount_path": "/scratch",
        "read_only": "",
        "is_checkpoint": "on",
        "description": "",
    }
    # Over the class's maximum: the service refuses, nothing is stored.
    response = staff_client.post("/admin/volumes/datavolume/add/", form, follow=True)
    assert not DataVolume.objects.exists()
    assert b"at most 2Ti" in response.content
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff_client.post("/admin/volumes/datavolume/add/", {**form, "size": "1Ti"})
    assert response.status_code == 302
    volume = DataVolume.objects.get(name="scratch")
    assert (volume.claim_name, volume.is_checkpoint, volume.created_by) == (
        "gp-vol-scratch",
        True,
        root,
    )
    assert callbacks, "the claim is applied once the admin's transaction commits"

    # Deleting in the admin removes only the portal's record.
    response = staff_client.post(f"/admin/volumes/datavolume/{volume.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not DataVolume.objects.exists()


def test_pool_caps_are_in_the_pool_admin(personas, staff_client):
    page = staff_client.get(f"/admin/quotas/gpupool/{personas.pool.pk}/change/").content.decode()
    assert "max_shm_size" in page
    assert "max_termination_grace_seconds" in page

"""/api/v1/volumes/ against kubesim: the claims the portal applies, the ones it must never
delete, and who may do what."""

import pytest

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

URL = "/api/v1/volumes/"


@pytest.fixture
def admin(org):
    from tests.factories import MembershipFactory, UserFactory

    user = UserFactory(username=f"adm-{org['project'].slug}")
    MembershipFactory(user=user, project=org["project"], role="admin")
    return user


@pytest.fixture
def standard(db):
    from volumes.models import StorageClass

    return StorageClass.objects.create(name="standard", max_size="10Ti")


def claim(org, name):
    from portal.kube import apply as kube

    return kube.get("v1", "PersistentVolumeClaim", name, org["project"].namespace)


def gone(obj) -> bool:
    # Deleted, or waiting for the pvc-protection finalizer.
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


def new_volume(client, org, **overrides):
    body = {
        "project": org["project"].slug,
        "name": "scratch",
        "kind": "new",
        "storage_class": "standard",
        "size": "100Gi",
        "mount_path": "/scratch",
        "read_only": False,
    }
    body.update(overrides)
    return client.post(URL, body, format="json")


def test_a_new_claim_is_applied_and_deleting_without_confirmation_keeps_it(
    org, admin, standard, api_client_for
):
    from volumes.models import DataVolume

    client = api_client_for(admin)
    response = new_volume(client, org)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["claim_name"] == "gp-vol-scratch"
    assert body["sync_state"] == "ok", body["sync_message"]
    pvc = claim(org, "gp-vol-scratch")
    assert pvc["spec"]["storageClassName"] == "standard"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "100Gi"
    labels = pvc["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert labels["gpu-portal.io/volume"] == "scratch"
    # Applying again changes nothing (same name, server-side apply).
    again = client.post(f"{URL}{body['id']}/sync/").json()
    assert again["sync_state"] == "ok"
    assert claim(org, "gp-vol-scratch")["metadata"]["uid"] == pvc["metadata"]["uid"]

    # delete_data without typing the name: 400, nothing deleted.
    response = client.delete(f"{URL}{body['id']}/?delete_data=true&confirm=scratc")
    assert response.status_code == 400
    assert "confirm" in response.json()["errors"]
    assert DataVolume.objects.filter(pk=body["id"]).exists()
    assert not gone(claim(org, "gp-vol-scratch"))

    # Without delete_data: only the portal's row goes, the claim and its data stay.
    response = client.delete(f"{URL}{body['id']}/")
    assert response.status_code == 200, response.json()
    assert response.json()["deleted_objects"] == []
    assert not DataVolume.objects.filter(pk=body["id"]).exists()
    assert not gone(claim(org, "gp-vol-scratch"))


def test_delete_data_with_confirmation_deletes_only_the_portals_claim(
    org, admin, standard, api_client_for
):
    from portal.kube import apply as kube

    client = api_client_for(admin)
    body = new_volume(client, org, name="tmpdata", mount_path="/tmpdata").json()
    response = client.delete(f"{URL}{body['id']}/?delete_data=true&confirm=tmpdata")
    assert response.status_code == 200, response.json()
    assert response.json()["deleted_objects"] == ["PersistentVolumeClaim/gp-vol-tmpdata"]
    assert gone(claim(org, "gp-vol-tmpdata"))

    # An existing claim the portal did not create is never deleted, even when asked.
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "team-data", "namespace": org["project"].namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        field_manager="someone-else",
    )
    body = client.post(
        URL,
        {
            "project": org["project"].slug,
            "name": "team",
            "kind": "existing",
            "claim_name": "team-data",
            "mount_path": "/team",
        },
        format="json",
    ).json()
    assert body["sync_state"] == "ok", body
    response = client.delete(f"{URL}{body['id']}/?delete_data=true&confirm=team")
    assert response.status_code == 400
    assert "never deletes" in response.json()["errors"]["delete_data"][0]
    assert not gone(claim(org, "team-data"))


def test_an_nfs_export_is_bound_through_a_pre_bound_pv_and_claim(org, admin, api_client_for):
    from portal.kube import apply as kube
    from tests.factories import UserFactory

    body = {
        "project": org["project"].slug,
        "name": "imagenet",
        "kind": "nfs",
        "nfs_server": "nfs.example.com",
        "nfs_path": "/exports/imagenet",
        "mount_path": "/data",
    }
    # A cluster-wide PV can reach any export: project admins cannot register one.
    response = api_client_for(admin).post(URL, body, format="json")
    assert response.status_code == 403
    staff = UserFactory(username=f"staff-{org['project'].slug}", is_staff=True)
    response = api_client_for(staff).post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    ns = org["project"].namespace
    pv = kube.get("v1", "PersistentVolume", f"gp-{ns}-vol-imagenet")
    assert pv["spec"]["nfs"] == {
        "server": "nfs.example.com",
        "path": "/exports/imagenet",
        "readOnly": True,
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["claimRef"]["name"] == "gp-vol-imagenet"
    assert pv["spec"]["claimRef"]["namespace"] == ns
    assert claim(org, "gp-vol-imagenet")["spec"]["volumeName"] == f"gp-{ns}-vol-imagenet"
    assert not any("hostPath" in str(v) for v in pv["spec"])


def test_who_may_manage_volumes_and_what_is_refused(org, admin, standard, api_client_for, settings):
    from tests.factories import MembershipFactory, ProjectFactory, UserFactory

    member = org["user"]
    viewer = UserFactory(username=f"view-{org['project'].slug}")
    MembershipFactory(user=viewer, project=org["project"], role="viewer")
    outsider = UserFactory(username=f"out-{org['project'].slug}")
    MembershipFactory(
        user=outsider, project=ProjectFactory(department=org["project"].department), role="admin"
    )

    assert new_volume(api_client_for(member), org).status_code == 403
    assert new_volume(api_client_for(viewer), org).status_code == 403
    response = new_volume(api_client_for(outsider), org)
    assert response.status_code == 400
    assert "project" in response.json()["errors"]

    client = api_client_for(admin)
    response = new_volume(client, org, size="20Ti")
    assert response.status_code == 400
    assert "at most 10Ti" in response.json()["errors"]["size"][0]
    response = new_volume(client, org, mount_path="/etc")
    assert response.status_code == 400
    assert "mount_path" in response.json()["errors"]
    response = new_volume(client, org, is_checkpoint=True, read_only=True)
    assert response.status_code == 400
    assert "read-write" in response.json()["errors"]["is_checkpoint"][0]
    created = new_volume(client, org, name="ckpt", is_checkpoint=True)
    assert created.status_code == 201, created.json()
    response = new_volume(client, org, name="ckpt2", is_checkpoint=True)
    assert response.status_code == 400
    assert "already has a checkpoint volume" in response.json()["errors"]["is_checkpoint"][0]

    # Members and viewers read; the outsider does not see the volume at all.
    volume_id = created.json()["id"]
    listed = api_client_for(viewer).get(URL, {"project": org["project"].slug}).json()
    assert [v["name"] for v in listed["results"]] == ["ckpt"]
    assert api_client_for(member).get(f"{URL}{volume_id}/").status_code == 200
    assert api_client_for(outsider).get(f"{URL}{volume_id}/").status_code == 404
    assert api_client_for(member).delete(f"{URL}{volume_id}/").status_code == 403
    assert api_client_for(viewer).post(f"{URL}{volume_id}/sync/").status_code == 403
    response = api_client_for(admin).patch(f"{URL}{volume_id}/", {"size": "1Ti"}, format="json")
    assert response.status_code == 400
    assert "size" in response.json()["errors"]

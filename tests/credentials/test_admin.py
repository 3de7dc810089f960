"""The admin console lists credentials (names, keys, who changed them) and changes nothing."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(client, django_user_model):
    user = django_user_model.objects.create_user("root", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def test_admin_lists_credentials_read_only(personas, superuser_client):
    from credentials.models import Credential

    credential = Credential.objects.create(
        project=personas.project_a,
        name="hf",
        kind="secret",
        keys=["token"],
        updated_by=personas.admin,
    )
    listing = superuser_client.get("/admin/credentials/credential/")
    assert listing.status_code == 200
    html = listing.content.decode()
    for shown in ("hf", "token", "alice"):
        assert shown in html
    assert superuser_client.get("/admin/credentials/credential/add/").status_code == 403
    change = superuser_client.get(f"/admin/credentials/credential/{credential.pk}/change/")
    assert change.status_code == 200  # the read-only view
    assert 'name="name"' not in change.content.decode()  # no input to edit
    deleted = superuser_client.post(f"/admin/credentials/credential/{credential.pk}/delete/")
    assert deleted.status_code == 403
    assert Credential.objects.filter(pk=credential.pk).exists()

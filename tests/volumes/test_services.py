"""volumes.services: the rules a volume is checked against before anything reaches the cluster."""

import pytest
from django.core.exceptions import ValidationError

pytestmark = pytest.mark.django_db


def errors_of(call) -> dict:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.message_dict


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"name": "Bad_Name"}, "name", "not a valid name"),
        ({"kind": "existing", "claim_name": ""}, "claim_name", "Name the PersistentVolumeClaim"),
        ({"kind": "existing", "claim_name": "x", "size": "1Gi"}, "size", "Only a new claim"),
        (
            {"kind": "new", "storage_class": "gold", "size": "1Gi"},
            "storage_class",
            "not an approved",
        ),
        ({"kind": "nfs", "nfs_server": "bad server!", "nfs_path": "/x"}, "nfs_server", "host name"),
        ({"kind": "nfs", "nfs_server": "10.0.0.5", "nfs_path": "/x/../y"}, "nfs_path", "absolute"),
        ({"mount_path": "/sys/fs"}, "mount_path", "/sys"),
    ],
)
def test_bad_volumes_are_refused_naming_the_field(personas, fields, field, words):
    from volumes.models import DataVolume
    from volumes.services import volume_create

    data = {
        "project": "alpha",
        "name": "data",
        "kind": "existing",
        "claim_name": "data-pvc",
        "mount_path": "/data",
        "apply": False,
    }
    data.update(fields)
    errors = errors_of(lambda: volume_create(actor=personas.staff, **data))
    assert field in errors, errors
    assert any(words in m for m in errors[field]), errors[field]
    assert not DataVolume.objects.exists()


def test_fixed_fields_and_the_checkpoint_rules_on_update(personas):
    from volumes.services import volume_create, volume_update

    volume = volume_create(
        actor=personas.admin,
        project="alpha",
        name="data",
        kind="existing",
        claim_name="data-pvc",
        mount_path="/data",
        apply=False,
    )
    errors = errors_of(lambda: volume_update(actor=personas.admin, volume=volume, size="1Ti"))
    assert "size" in errors
    errors = errors_of(
        lambda: volume_update(actor=personas.admin, volume=volume, is_checkpoint=True)
    )
    assert "read-write" in errors["is_checkpoint"][0]
    volume = volume_update(actor=personas.admin, volume=volume, is_checkpoint=True, read_only=False)
    assert volume.is_checkpoint

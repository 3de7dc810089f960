"""volumes/manifests.py: pure, deterministic names, the portal's labels, no host paths."""

from volumes.manifests import VolumeSpec, build_volume_objects, is_portal_claim


def spec(**overrides) -> VolumeSpec:
    base = dict(
        project_slug="alpha",
        namespace="gp-alpha",
        name="imagenet",
        kind="nfs",
        claim_name="gp-vol-imagenet",
        read_only=True,
        size="1Ti",
        nfs_server="10.0.0.5",
        nfs_path="/exports/imagenet",
    )
    base.update(overrides)
    return VolumeSpec(**base)


def test_nfs_gives_a_retained_pv_pre_bound_to_its_claim():
    pv, claim = build_volume_objects(spec())
    assert pv["metadata"]["name"] == "gp-gp-alpha-vol-imagenet"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["claimRef"]["namespace"] == "gp-alpha"
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"]
    assert claim["spec"]["storageClassName"] == ""  # no dynamic provisioning for the export
    assert "hostPath" not in str(pv) + str(claim)
    assert build_volume_objects(spec()) == [pv, claim]  # deterministic


def test_new_claims_and_the_label_proof_of_ownership():
    (claim,) = build_volume_objects(spec(kind="new", storage_class="fast", size="100Gi"))
    assert claim["metadata"]["name"] == "gp-vol-imagenet"
    assert claim["spec"]["storageClassName"] == "fast"
    assert is_portal_claim(claim, spec())
    # Same name, labelled for another project or volume, or not labelled: not the portal's.
    assert not is_portal_claim(claim, spec(project_slug="beta"))
    assert not is_portal_claim(claim, spec(name="other"))
    assert not is_portal_claim({"metadata": {"name": "gp-vol-imagenet"}}, spec())
    assert build_volume_objects(spec(kind="existing")) == []

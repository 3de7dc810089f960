"""token_create / token_revoke: personal API tokens are stored hashed and revoked by owner."""

from datetime import timedelta

import pytest
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.utils import timezone
from knox.models import AuthToken

from tenants.services import token_create, token_revoke


def test_token_is_stored_only_as_a_hash(personas):
    token, secret = token_create(actor=personas.member, expires_in=timedelta(days=30))
    assert len(secret) == 64
    assert token.token_key == secret[:15]
    assert secret not in token.digest
    assert token.expiry - timezone.now() > timedelta(days=29)


def test_token_without_a_lifetime_gets_the_default(personas):
    token, _ = token_create(actor=personas.member, expires_in=None)
    assert timedelta(days=89) < token.expiry - timezone.now() <= timedelta(days=90)


def test_token_never_expires_only_when_the_site_says_so(personas, settings):
    settings.PORTAL_TOKEN_TTL_DAYS = 0
    token, _ = token_create(actor=personas.member, expires_in=None)
    assert token.expiry is None


def test_expiry_must_be_in_the_future(personas):
    with pytest.raises(ValidationError, match="future"):
        token_create(actor=personas.member, expires_in=timedelta(0))


def test_only_the_owner_revokes_a_token(personas):
    token, _ = token_create(actor=personas.member, expires_in=None)
    with pytest.raises(ObjectDoesNotExist):
        token_revoke(actor=personas.admin, token_key=token.token_key)
    assert AuthToken.objects.filter(pk=token.pk).exists()
    token_revoke(actor=personas.member, token_key=token.token_key)
    assert not AuthToken.objects.filter(pk=token.pk).exists()

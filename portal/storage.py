"""Static files storage for production: whitenoise's compressed, hashed files, degrading when
`collectstatic` has not run (or missed a file) instead of failing every page that links one."""

from __future__ import annotations

import logging

from whitenoise.storage import CompressedManifestStaticFilesStorage

log = logging.getLogger(__name__)


class ForgivingManifestStaticFilesStorage(CompressedManifestStaticFilesStorage):
    """A name missing from the manifest is linked unhashed (and logged), not a ValueError.

    Django's strict manifest raises while rendering `{% static %}`; without `collectstatic` that
    turns every HTML page, the 404 and 500 pages included, into a 500. The unhashed URL still
    works wherever the file is served (whitenoise's finders, a CDN), and the warning says what
    to run.
    """

    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:
            log.warning(
                "static file %r is not in the manifest; run `manage.py collectstatic`", name
            )
            return name

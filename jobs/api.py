"""The jobs app's REST endpoints, which live with their capability; importing this module (as
portal.api.load_api_modules does for every app) registers them with the router in this order:
arrays (/api/v1/arrays/, imported by the jobs endpoints), jobs (/api/v1/jobs/), then saved
templates (/api/v1/templates/)."""

# The order is the routes' order.
# isort: off
from jobs.submission import api as submission_api  # noqa: F401
from jobs.job_templates import api as template_api  # noqa: F401
# isort: on

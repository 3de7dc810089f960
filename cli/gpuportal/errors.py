"""Exit codes and the one exception type the commands raise.

Scripts branch on these codes, so they are part of the CLI's interface: never renumber them.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_JOB_FAILED = 1  # a job this command waited for ended Failed or Cancelled
EXIT_USAGE = 2  # bad flags or arguments, or the portal refused the request as invalid (400, 409)
EXIT_AUTH = 3  # no token, a wrong or expired token (401), or not allowed (403)
EXIT_NOT_FOUND = 4  # the job, project or page does not exist or is not yours (404)
EXIT_SERVER = 5  # the portal failed (5xx), timed out, or could not be reached

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 a job ended Failed or Cancelled; 2 usage error or a request the "
    "portal refused as invalid; 3 authentication or permission error; 4 not found; "
    "5 server or network error."
)


class CliError(Exception):
    """A failure to report on one line and exit with `exit_code`."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

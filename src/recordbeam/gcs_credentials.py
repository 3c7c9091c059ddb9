"""Which Google credentials this process uses for ``gs://``: found at once, said in one line.

Beam looks for credentials on a process's first ``gs://`` access
(``apache_beam.internal.gcp.auth``): ``google.auth.default()``, retried four times with
exponential backoff when it finds none (~25 s measured here, where the probe of Google's
metadata server fails at once; longer where each probe waits for its timeout), each
retry logged with a traceback, then it connects anonymously. :func:`settle` asks ``google.auth`` once
instead, before that first access, and says in one line what it found:

- ``STORAGE_EMULATOR_HOST`` is set: ``gs://`` goes to that emulator, without credentials
  (Google's storage client sends every request there; credentials would only be
  refreshed against Google);
- credentials found: what they are (a service account's e-mail, the account of
  ``gcloud auth application-default login``, the metadata server's service account...)
  and where they came from; Beam's own search finds the same ones at once and uses
  them, with ``--impersonate_service_account`` on top;
- none: Beam is told to connect anonymously
  (:func:`recordbeam.local.internals.answer_beam_anonymously`), which it would do anyway
  after its retries: public buckets stay readable, anything else is refused by Google.

The line names accounts, files and projects, never a key or a token.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from recordbeam.local.internals import answer_beam_anonymously

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
KEY_FILE_VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
HOW_TO_LOG_IN = ("run `gcloud auth application-default login`, or set "
                 f"{KEY_FILE_VARIABLE} to a service account's key file")

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcsCredentials:
    """What ``gs://`` is reached with in this process."""

    #: Google credentials were found (False: anonymous, or an emulator).
    found: bool
    #: One line for the user, without secrets.
    line: str
    #: ``gs://`` goes to a storage emulator (``STORAGE_EMULATOR_HOST``).
    emulator: bool = False


_settled: GcsCredentials | None = None
_lock = threading.Lock()


def uses_gcs(arguments: list[str] | tuple[str, ...]) -> bool:
    """Whether command-line ``arguments`` name a ``gs://`` path anywhere (an option's
    value, ``--temp_location=gs://...``)."""
    return any("gs://" in argument for argument in arguments)


def settle(report: Callable[[str], None] | None = None) -> GcsCredentials:
    """Find this process's ``gs://`` credentials once (:func:`look_up`), hand Beam the
    answer when it is "none", and pass the one line to ``report`` (default: this
    module's log). Later calls return the same answer and report nothing."""
    global _settled
    if _settled is not None:  # without the lock: filesystems asks before each gs:// access
        return _settled
    with _lock:
        if _settled is not None:
            return _settled
        settled = look_up()
        if not settled.found:
            answer_beam_anonymously()
        _settled = settled
    (report or _LOG.info)(settled.line)
    return settled


def look_up() -> GcsCredentials:
    """The credentials ``gs://`` would use here, from one ``google.auth.default()`` call
    (no retries), or the emulator. Reads the environment; changes nothing."""
    emulator = os.environ.get(EMULATOR_VARIABLE)
    if emulator:
        return GcsCredentials(False, f"gs:// goes to the storage emulator at {emulator} "
                                     f"({EMULATOR_VARIABLE}), without credentials", emulator=True)
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        return GcsCredentials(False, "gs:// needs Google's client libraries: "
                                     "pip install 'apache-beam[gcp]'")
    try:
        credentials, project = google.auth.default()
    except DefaultCredentialsError as error:
        return GcsCredentials(False, f"gs:// without credentials: {_why_none(error)} "
                                     f"({HOW_TO_LOG_IN}); connecting anonymously, which "
                                     "reaches public buckets only")
    where = (f" from {KEY_FILE_VARIABLE}={os.environ[KEY_FILE_VARIABLE]}"
             if os.environ.get(KEY_FILE_VARIABLE) else "")
    of_project = f", project {project}" if project else ""
    return GcsCredentials(True, f"gs:// with Google application default credentials: "
                                f"{describe(credentials)}{where}{of_project}")


def _why_none(error: Exception) -> str:
    key_file = os.environ.get(KEY_FILE_VARIABLE)
    if key_file:  # the file is unreadable or not a credentials file: google.auth says which
        return f"{KEY_FILE_VARIABLE}={key_file} cannot be used: " + str(error).splitlines()[0]
    return "no Google credentials were found"


def describe(credentials: object) -> str:
    """Who ``credentials`` (a ``google.auth`` credentials object) act as, without
    contacting Google: what the object itself knows."""
    module = type(credentials).__module__
    email = getattr(credentials, "service_account_email", None)
    email = email if isinstance(email, str) and email not in ("", "default") else None
    if module == "google.oauth2.service_account":
        return f"service account {email}"
    if module == "google.auth.compute_engine.credentials":
        return "the service account of this machine's metadata server" + (
            f" ({email})" if email else "")
    if module == "google.oauth2.credentials":
        account = getattr(credentials, "account", "") or ""
        return "the user credentials of `gcloud auth application-default login`" + (
            f" ({account})" if account else "")
    if module == "google.auth.impersonated_credentials":
        return f"service account {email or 'unknown'}, impersonated"
    if module.startswith(("google.auth.external_account", "google.auth.identity_pool",
                          "google.auth.aws", "google.auth.pluggable")):
        return "workload identity federation" + (f" as {email}" if email else "")
    return type(credentials).__name__

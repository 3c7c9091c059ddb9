"""Whether a bucket can be used, asked once per process before its first use.

A store that cannot be used is a setting to fix, not a failure to retry: Google's storage
client retries a connection that fails for 120 s, Beam's S3 client for minutes, and both
end with a Python tuple or a ``RetryError``. Before a process's first access to a bucket
(``s3://`` or ``gs://``), one listing of at most one object under the path, with a
bounded timeout and no retry, tells apart what the user can fix; each becomes one
:class:`~recordbeam.errors.UsageError` (exit 2) naming the store, the endpoint or bucket,
and what to check:

- the endpoint does not answer (no network, a wrong ``--s3_endpoint_url``, an emulator
  that is not running);
- the bucket does not exist;
- the credentials are refused (a wrong key, an expired token), or access is denied.

A listing, not a bucket lookup: reading objects does not need the right to read a
bucket's own metadata (GCS's ``roles/storage.objectViewer`` lacks it), while every run
lists the folders it reads and writes. The timeout is :data:`TIMEOUT_VARIABLE`'s value in
seconds, else :data:`DEFAULT_TIMEOUT`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from recordbeam.errors import UsageError
from recordbeam.local.internals import filesystems_options

#: Seconds one probe may take to connect, and then to get its answer.
DEFAULT_TIMEOUT = 20.0
TIMEOUT_VARIABLE = "RECORDBEAM_STORE_TIMEOUT"

_checked: set[tuple[str, str, Any]] = set()
_lock = threading.Lock()


def check_once(path: str) -> None:
    """Raise ``UsageError`` when the bucket of ``path`` (``s3://`` or ``gs://``) cannot be
    used from this process; each bucket is checked once per process and setting."""
    scheme, _, rest = path.partition("://")
    if scheme not in ("s3", "gs") or not rest:
        return
    bucket, _, name = rest.partition("/")
    if not bucket:
        return
    setting = _s3_setting() if scheme == "s3" else os.environ.get("STORAGE_EMULATOR_HOST")
    key = (scheme, bucket, setting)
    if key in _checked:
        return
    with _lock:
        if key in _checked:
            return
        prefix = name.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        (_check_s3 if scheme == "s3" else _check_gcs)(bucket, prefix, _timeout())
        _checked.add(key)


def _timeout() -> float:
    value = os.environ.get(TIMEOUT_VARIABLE)
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0
    if not seconds > 0:
        raise UsageError(f"{TIMEOUT_VARIABLE}={value!r}: give the seconds a store may take "
                         "to answer, a number above 0")
    return seconds


# --- S3 ----------------------------------------------------------------------------------


def _s3_options() -> Any:
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    _readable, options = filesystems_options()
    if not isinstance(options, PipelineOptions):
        options = PipelineOptions([])
    return options.view_as(S3Options)


def _s3_setting() -> tuple:
    s3 = _s3_options()
    return (s3.s3_endpoint_url, s3.s3_region_name, s3.s3_access_key_id)


def _check_s3(bucket: str, prefix: str, timeout: float) -> None:
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    except ImportError:
        raise UsageError("s3:// needs Amazon's client library: pip install "
                         "'apache-beam[aws]'") from None
    s3 = _s3_options()
    where = s3.s3_endpoint_url or "AWS S3" + (f" ({s3.s3_region_name})" if s3.s3_region_name
                                              else "")
    store = f"s3://{bucket} at {where}"
    client = boto3.session.Session().client(
        "s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version,
        use_ssl=not s3.s3_disable_ssl, verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url,
        aws_access_key_id=s3.s3_access_key_id, aws_secret_access_key=s3.s3_secret_access_key,
        aws_session_token=s3.s3_session_token,
        config=Config(connect_timeout=timeout, read_timeout=timeout,
                      retries={"max_attempts": 1}))
    try:
        client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except NoCredentialsError:
        raise UsageError(f"{store}: no AWS credentials were found: give --s3_access_key_id "
                         "and --s3_secret_access_key, or set AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY, or configure ~/.aws") from None
    except ClientError as error:
        raise UsageError(_s3_refusal(store, error)) from None
    except BotoCoreError as error:  # no connection, a timeout, a bad endpoint URL
        raise UsageError(f"{store} cannot be reached ({error}): check --s3_endpoint_url, "
                         f"the network or proxy, or raise {TIMEOUT_VARIABLE} (now "
                         f"{timeout:g} s)") from None


def _s3_refusal(store: str, error: Any) -> str:
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    said = str(error.response.get("Error", {}).get("Message", "") or code)
    if code in ("NoSuchBucket", "404") or status == 404:
        return (f"{store}: the bucket does not exist: check its name, and --s3_endpoint_url "
                "and --s3_region_name")
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                "InvalidToken", "InvalidClientTokenId"):
        return (f"{store}: the credentials were refused ({code}: {said}): check "
                "--s3_access_key_id, --s3_secret_access_key and --s3_session_token, or "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    if code in ("PermanentRedirect", "AuthorizationHeaderMalformed") or status == 301:
        return f"{store}: the bucket is in another region ({said}): check --s3_region_name"
    if code == "AccessDenied" or status == 403:
        return (f"{store}: access denied ({said}): check that these credentials may list "
                "and read the bucket (and write it, for an output)")
    return f"{store} refused the request ({code or status}: {said})"


# --- GCS ---------------------------------------------------------------------------------


def _check_gcs(bucket: str, prefix: str, timeout: float) -> None:
    try:
        from apache_beam.io.gcp import gcsio
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
        from requests import exceptions as http
    except ImportError:
        raise UsageError("gs:// needs Google's client libraries: pip install "
                         "'apache-beam[gcp]'") from None
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    where = f"the storage emulator at {emulator}" if emulator else "Google Cloud Storage"
    store = f"gs://{bucket} on {where}"
    _readable, options = filesystems_options()
    try:
        client = gcsio.GcsIO(pipeline_options=options).client
        blobs = client.list_blobs(bucket, prefix=prefix, max_results=1, timeout=timeout,
                                  retry=None)
        next(iter(blobs), None)
    except api.NotFound:
        raise UsageError(f"{store}: the bucket does not exist: check its name") from None
    except (api.Forbidden, api.Unauthorized) as error:
        raise UsageError(f"{store}: access denied ({error.message}): check which account "
                         "gs:// uses (the line above) and that it may list and read the "
                         "bucket (and write it, for an output)") from None
    except (http.RequestException, auth.TransportError, api.RetryError,
            api.ServiceUnavailable, OSError) as error:
        check = f"check {'STORAGE_EMULATOR_HOST' if emulator else 'the network or proxy'}"
        raise UsageError(f"{store} cannot be reached ({type(error).__name__}): {check}, or "
                         f"raise {TIMEOUT_VARIABLE} (now {timeout:g} s)") from None

"""The one line saying which Google credentials ``gs://`` uses, from the credentials files
google.auth reads (made here; nothing contacts Google), and Beam told "anonymous"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recordbeam import gcs_credentials

pytest.importorskip("google.auth")


@pytest.fixture()
def no_gcloud(monkeypatch, tmp_path):
    """No key file, no emulator, and a gcloud configuration folder without credentials."""
    for name in (gcs_credentials.EMULATOR_VARIABLE, gcs_credentials.KEY_FILE_VARIABLE,
                 "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    return monkeypatch


def test_the_emulator_is_named_and_needs_no_credentials(no_gcloud):
    no_gcloud.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9023")
    found = gcs_credentials.look_up()
    assert (found.found, found.emulator) == (False, True)
    assert found.line == ("gs:// goes to the storage emulator at http://127.0.0.1:9023 "
                          "(STORAGE_EMULATOR_HOST), without credentials")


def test_a_user_login_is_named_by_its_account_without_its_secrets(no_gcloud, tmp_path):
    key = tmp_path / "adc.json"
    key.write_text(json.dumps({"type": "authorized_user", "client_id": "the-client-id",
                               "client_secret": "the-client-secret",
                               "refresh_token": "the-refresh-token",
                               "account": "ada@example.com", "quota_project_id": "p-1"}))
    no_gcloud.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    found = gcs_credentials.look_up()
    assert found.found
    assert found.line == (
        "gs:// with Google application default credentials: the user credentials of "
        f"`gcloud auth application-default login` (ada@example.com) from "
        f"GOOGLE_APPLICATION_CREDENTIALS={key}")
    assert "the-client-secret" not in found.line and "the-refresh-token" not in found.line


def test_a_service_account_key_is_named_by_its_email_and_project(no_gcloud, tmp_path):
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    key = tmp_path / "runner.json"
    key.write_text(json.dumps({
        "type": "service_account", "project_id": "my-project", "private_key_id": "abc123",
        "private_key": pem, "client_email": "runner@my-project.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    no_gcloud.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    found = gcs_credentials.look_up()
    assert found.line == (
        "gs:// with Google application default credentials: service account "
        f"runner@my-project.iam.gserviceaccount.com from GOOGLE_APPLICATION_CREDENTIALS={key}, "
        "project my-project")
    assert "PRIVATE KEY" not in found.line and "abc123" not in found.line


def test_a_key_file_that_cannot_be_used_is_named(no_gcloud, tmp_path):
    key = tmp_path / "key.json"
    key.write_text("not json")
    no_gcloud.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    found = gcs_credentials.look_up()
    assert not found.found
    assert found.line.startswith(
        f"gs:// without credentials: GOOGLE_APPLICATION_CREDENTIALS={key} cannot be used: ")
    assert found.line.endswith("; connecting anonymously, which reaches public buckets only")


def test_beam_told_anonymous_does_not_search_for_credentials():
    # In a fresh process: Beam's answer is kept for the process. google.auth.default is
    # replaced by a failure, so a search by Beam would show.
    code = (
        "import google.auth\n"
        "def searched(*a, **k):\n"
        "    raise SystemExit('Beam searched for credentials')\n"
        "google.auth.default = searched\n"
        "from recordbeam.local.internals import answer_beam_anonymously\n"
        "assert answer_beam_anonymously()\n"
        "from apache_beam.internal.gcp import auth\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "print(auth.get_service_credentials(PipelineOptions([])))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "None"), done.stderr


def test_the_line_is_reported_once_per_process():
    code = (
        "import os\n"
        "os.environ['STORAGE_EMULATOR_HOST'] = 'http://127.0.0.1:9'\n"
        "from recordbeam import gcs_credentials\n"
        "said = []\n"
        "first = gcs_credentials.settle(report=said.append)\n"
        "again = gcs_credentials.settle(report=said.append)\n"
        "print(len(said), first is again)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["1", "True"], done.stderr


def test_arguments_naming_gcs_are_seen():
    assert gcs_credentials.uses_gcs(["--temp_location=gs://b/tmp"])
    assert not gcs_credentials.uses_gcs(["--output", "out", "--images", "s3://b/x"])

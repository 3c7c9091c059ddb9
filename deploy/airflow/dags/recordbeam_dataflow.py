"""Nightly COCO to TFRecord on Dataflow, through the Apache Beam provider's
``BeamRunPythonPipelineOperator`` (``apache-airflow-providers-apache-beam``, which needs
``apache-airflow-providers-google`` installed beside it, whatever the runner).

The operator runs recordbeam's pipeline script with recordbeam's own interpreter, reads
the job's id from Beam's log line ``Created job with id: [...]`` (recordbeam shows the
Dataflow runner's log on stderr), pushes it to XCom as ``dataflow_job_id``, links the
job's page, and waits for the job through the Dataflow API. recordbeam submits and exits
(``detach``); the job commits the output itself, ``manifest.json`` last. An output that is
up to date (``if_changed``) submits no job: the task ends without one.

Set in the environment of the DAG processor and the workers:

- ``RECORDBEAM_PYTHON``: the interpreter of recordbeam's own environment, with
  recordbeam's wheel installed with its ``gcp`` extra (default ``/srv/recordbeam/.venv/bin/python``);
- ``RECORDBEAM_PIPELINES``: a copy of recordbeam's ``pipelines/`` folder (default
  ``/srv/recordbeam/pipelines``).

Workers start fastest from recordbeam's SDK image (``deploy/sdk-container``):
``sdk_container_image``. Each run's paths come from its params, which a run's conf
overrides (``airflow dags trigger recordbeam_dataflow -c '{"output": "gs://..."}'``).
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Param

RECORDBEAM_PYTHON = os.environ.get("RECORDBEAM_PYTHON", "/srv/recordbeam/.venv/bin/python")
RECORDBEAM_PIPELINES = os.environ.get("RECORDBEAM_PIPELINES", "/srv/recordbeam/pipelines")

with DAG(
    dag_id="recordbeam_dataflow",
    description="COCO to sharded TFRecords on Dataflow, rebuilt when the inputs change",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two jobs must not replace the same output folder at once
    params={
        "images": Param("gs://BUCKET/coco/train2017", type="string"),
        "annotations": Param("gs://BUCKET/coco/annotations/instances_train2017.json",
                             type="string"),
        "output": Param("gs://BUCKET/coco-tfrecord", type="string"),
        "project": Param("PROJECT", type="string"),
        "region": Param("us-central1", type="string"),
        "temp_location": Param("gs://BUCKET/tmp", type="string"),
        "sdk_container_image": Param("REGION-docker.pkg.dev/PROJECT/REPOSITORY/recordbeam-sdk:TAG",
                                     type="string"),
        "max_num_workers": Param(20, type="integer"),
    },
    tags=["recordbeam"],
) as dag:
    BeamRunPythonPipelineOperator(
        task_id="convert_coco",
        runner="DataflowRunner",
        py_file=os.path.join(RECORDBEAM_PIPELINES, "coco_to_tfrecord.py"),
        py_interpreter=RECORDBEAM_PYTHON,
        pipeline_options={
            "images": "{{ params.images }}",
            "annotations": "{{ params.annotations }}",
            "output": "{{ params.output }}",
            "if_changed": True,
            "detach": True,
            "temp_location": "{{ params.temp_location }}",
            "sdk_container_image": "{{ params.sdk_container_image }}",
            "max_num_workers": "{{ params.max_num_workers }}",
        },
        dataflow_config={
            "job_name": "recordbeam-coco",
            "project_id": "{{ params.project }}",
            "location": "{{ params.region }}",
        },
    )

"""Nightly COCO to TFRecord with recordbeam: the output is rebuilt only when its inputs
changed (``--if-changed``), on the machine running the task or, with ``options``, on a
Flink or Spark cluster or any Beam job server.

recordbeam runs in its own environment, not Airflow's (Airflow pins its own protobuf,
numpy and the rest): set ``RECORDBEAM_PYTHON`` in the environment of the DAG processor and
the workers to that environment's interpreter (default ``/srv/recordbeam/.venv/bin/python``).

Each run's paths come from its params, which a run's conf overrides::

    airflow dags trigger recordbeam_nightly -c '{"images": "/data/coco/train2017", ...}'

The task fails on recordbeam's exit codes (1 data problems, 2 usage, 3 run failed) with
recordbeam's message in the task log; an output that is up to date ends it at once
("OUT is up to date ... nothing to do"). With ``--detach`` in ``options`` the task
ends once the job is submitted, its stdout line naming the job
(``submitted job JOB_ID to the RUNNER; ...``); the job commits OUT itself.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param

RECORDBEAM_PYTHON = os.environ.get("RECORDBEAM_PYTHON", "/srv/recordbeam/.venv/bin/python")

with DAG(
    dag_id="recordbeam_nightly",
    description="COCO to sharded TFRecords, rebuilt when the inputs change",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two runs must not replace the same output folder at once
    params={
        "images": Param("/data/coco/train2017", type="string",
                        description="folder of the images (any Beam filesystem)"),
        "annotations": Param("/data/coco/annotations/instances_train2017.json", type="string",
                             description="COCO instances JSON"),
        "output": Param("/data/tfrecord/coco", type="string",
                        description="output folder; manifest.json appears last"),
        "options": Param("", type="string",
                         description="more options of recordbeam convert coco and Beam's, e.g. "
                         "--runner FlinkRunner --flink_master HOST:8081 --detach (empty: "
                         "this machine's runner)"),
    },
    tags=["recordbeam"],
) as dag:
    BashOperator(
        task_id="convert_coco",
        # Paths reach the command through the environment, never spliced into the
        # script; options is split into words on purpose.
        bash_command=(
            '"$RECORDBEAM_PYTHON" -m recordbeam convert coco --images "$IMAGES" '
            '--annotations "$ANNOTATIONS" --output "$OUTPUT" --if-changed --quiet $OPTIONS'
        ),
        env={
            "RECORDBEAM_PYTHON": RECORDBEAM_PYTHON,
            "IMAGES": "{{ params.images }}",
            "ANNOTATIONS": "{{ params.annotations }}",
            "OUTPUT": "{{ params.output }}",
            "OPTIONS": "{{ params.options }}",
        },
        append_env=True,
    )

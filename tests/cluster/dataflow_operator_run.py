"""Run the Dataflow DAG's task the way Airflow's worker does, against a stand-in of the
Dataflow API: run with the Airflow environment's Python (not the test environment's).

    python dataflow_operator_run.py --dags DIR --params JSON --beam-options JSON

Loads ``recordbeam_dataflow`` from DIR (and fails on any DAG import error there), renders
its task with the DAG's params updated by ``--params`` (as a run's conf does), adds
``--beam-options`` to its pipeline options (the stand-in's endpoint, local staging), and
calls the operator's own ``execute``. Only the two calls that reach Google's API after
the submission (the job's page link, the wait for the job's end) are replaced: everything
up to the job id reaching XCom is the provider's code and recordbeam's. Prints, as JSON,
what was pushed to XCom, what ``execute`` returned, and the project of the hook those two
calls would use (its credentials loaded from the connection, as they would be).
"""

from __future__ import annotations

import argparse
import json


class _TaskInstance:
    """What the operator uses of its task instance: XCom pushes, recorded."""

    def __init__(self) -> None:
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dags", required=True)
    parser.add_argument("--params", type=json.loads, default={})
    parser.add_argument("--beam-options", type=json.loads, default={})
    args = parser.parse_args()

    from airflow.dag_processing.dagbag import DagBag
    from airflow.providers.google.cloud.hooks.dataflow import DataflowHook
    from airflow.providers.google.cloud.links.dataflow import DataflowJobLink

    bag = DagBag(dag_folder=args.dags)
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("recordbeam_dataflow")
    task = dag.get_task("convert_coco")

    DataflowHook.wait_for_done = lambda self, **kwargs: None
    DataflowJobLink.persist = staticmethod(lambda **kwargs: None)

    ti = _TaskInstance()
    params = {name: param.value for name, param in dag.params.items()} | args.params
    context = {"params": params, "ti": ti, "task_instance": ti}
    task.render_template_fields(context)
    task.pipeline_options.update(args.beam_options)
    returned = task.execute(context)
    print(json.dumps({"xcom": ti.xcom, "returned": returned,
                      "job_name": task.dataflow_job_name,
                      "connection_project": task.dataflow_hook.project_id}))


if __name__ == "__main__":
    main()

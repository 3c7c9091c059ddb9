"""The pipeline options recordbeam builds make each view once: every view shares the
options' values, and a pickled or copied options object has the values, not the views."""

from __future__ import annotations

import copy
import pickle

from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    TypeOptions,
)

from recordbeam.local.runner import pipeline_options


def test_a_view_is_made_once_and_shares_the_values_of_every_other():
    options = pipeline_options(["--direct_num_workers=1", "--project=p"])
    assert options.view_as(TypeOptions) is options.view_as(TypeOptions)
    options.view_as(GoogleCloudOptions).project = "q"
    assert options.get_all_options()["project"] == "q"
    assert options.view_as(DirectOptions).direct_num_workers == 1


def test_a_pickled_or_copied_object_has_the_values_and_views_of_its_own():
    options = pipeline_options(["--direct_num_workers=1", "--project=p"])
    view = options.view_as(GoogleCloudOptions)
    for copied in (pickle.loads(pickle.dumps(options)), copy.deepcopy(options)):
        assert "_views" not in vars(copied)
        assert copied.view_as(GoogleCloudOptions).project == "p"
        assert copied.view_as(GoogleCloudOptions) is not view
        copied.view_as(GoogleCloudOptions).project = "other"
        assert view.project == "p"

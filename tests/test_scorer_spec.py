"""A scorer string is read in one place (search.scoring.parse), and the check before loading
(search.api.check_scorer) and the load (search.scoring.load) follow that one reading; an
embedded model's folder is found through the core's registry (search.models.folder_of)."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.api import check_scorer
from search.models import ModelNotFoundError, folder_of
from search.scoring import ScorerSpec, load, parse, prm_spec

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("spec", "want"), [
    ("steps", ScorerSpec(name="steps")),
    ("value", ScorerSpec(name="value")),
    ("logprob", ScorerSpec(name="logprob")),
    ("prm:tiny-arith-prm", ScorerSpec(prm="tiny-arith-prm")),
    ("prm:./my-prm", ScorerSpec(prm="./my-prm")),
    ("prm:steps", ScorerSpec(prm="steps")),  # the prefix makes any string a PRM's
    ("org/some-prm", ScorerSpec(prm="org/some-prm")),  # a hub id needs no prefix
    ("./my-prm", ScorerSpec(prm="./my-prm")),
])
def test_parse_reads_each_kind_of_scorer_string(spec, want):
    assert parse(spec) == want
    if want.prm is not None:
        assert parse(prm_spec(want.prm)) == want


def test_an_unknown_name_is_the_registrys_error_with_the_close_names():
    with pytest.raises(ValueError, match=r"unknown scorer 'stepz'.*or a PRM path.*'steps'"):
        parse("stepz")
    for use in (check_scorer, load):  # both read it through parse: the same error
        with pytest.raises(ValueError, match="unknown scorer 'stepz'"):
            use("stepz")


def test_check_and_load_read_a_prm_path_alike():
    """A PRM folder that does not exist: refused by the check (before anything loads) and by
    the load, both naming the path with the prefix taken off."""
    with pytest.raises(ModelNotFoundError, match="no model directory at '/no/such/prm'"):
        check_scorer("prm:/no/such/prm")
    with pytest.raises(ModelNotFoundError, match="/no/such/prm"):
        load("prm:/no/such/prm")


def test_embedded_models_are_found_in_their_folders_through_the_core():
    models = ROOT / "training" / "models"
    for name in ("tiny-arith", "tiny-code", "tiny-arith-prm", "tiny-code-prm"):
        assert folder_of(name) == models / name
    assert folder_of("smollm2-135m") is None  # kept in the cache, in no folder of its own
    assert folder_of(str(models / "tiny-arith")) is None  # a path is no embedded name
    assert folder_of("no-such-model") is None

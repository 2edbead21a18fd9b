"""Boolean flags take what Go's strconv.ParseBool takes, as upstream's components do."""

from __future__ import annotations

import argparse

import pytest

from services.runtime import boolean_flag


@pytest.mark.parametrize(("text", "want"), [("true", True), ("True", True), ("TRUE", True), ("t", True),
                                            ("1", True), ("false", False), ("F", False), ("0", False)])
def test_go_spellings_are_accepted(text: str, want: bool) -> None:
    assert boolean_flag(text) is want


@pytest.mark.parametrize("text", ["yes", "no", "tRuE", "", "2"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid boolean"):
        boolean_flag(text)


def test_a_bare_flag_means_true() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leader-elect", type=boolean_flag, nargs="?", const=True, default=True)
    assert parser.parse_args(["--leader-elect"]).leader_elect is True
    assert parser.parse_args(["--leader-elect=false"]).leader_elect is False

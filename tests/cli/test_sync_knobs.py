"""One table for the transfer knobs: `ferry sync`'s options and the data_sync phase's settings take every default
and bound from the engine's TransferSettings, so a default or bound written anywhere else fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import annotated_types
import pytest
import typer

from connectors.transfer import TransferSettings, bounds
from ferry import units
from ferry.cli import app
from ferry.phases.base import open_phase
from ferry.phases.data_sync import DataSyncSettings
from ferry.plan import load_plan

# Each engine knob a user sets, by the `ferry sync` option that sets it.
OPTIONS = {
    "threads": "threads",
    "part_size": "part_size",
    "multipart_threshold": "multipart_threshold",
    "copy_threshold": "copy_threshold",
    "memory_budget": "memory_budget",
    "bwlimit": "bwlimit",
    "retry_budget_s": "retry_budget",
    "retries": "retries",
    "checksum": "checksum",
    "delete": "delete",
    "dry_run": "dry_run",
}
# Options whose values are sizes as people write them ("8M").
SIZES = {"part_size", "multipart_threshold", "copy_threshold", "memory_budget", "bwlimit"}
# A plan sets every knob but dry_run (a run's, not a plan's: `ferry rollback --dry-run`, approvals).
PLAN_KNOBS = sorted(set(OPTIONS) - {"dry_run"})


def sync_options() -> dict:
    command = typer.main.get_command(app).commands["sync"]
    return {param.name: param for param in command.params}


def test_every_bounded_knob_has_an_option_and_a_plan_setting() -> None:
    bounded = {knob.name for knob in dataclasses.fields(TransferSettings) if "bounds" in knob.metadata}
    assert bounded <= set(OPTIONS)
    assert set(PLAN_KNOBS) <= set(DataSyncSettings.model_fields), "the same knobs as `ferry sync`"


@pytest.mark.parametrize("knob", sorted(OPTIONS))
def test_each_sync_option_has_the_engines_default_and_bounds(knob: str) -> None:
    option = sync_options()[OPTIONS[knob]]
    default = option.default
    if knob in SIZES and default is not None:
        default = units.parse_size(default)
    assert default == getattr(TransferSettings, knob)
    if knob not in SIZES:  # sizes are text: the engine checks their bounds once they are parsed
        limits = bounds(knob)
        assert (option.min, option.max) == (limits.least, limits.most)


@pytest.mark.parametrize("knob", PLAN_KNOBS)
def test_each_data_sync_setting_has_the_engines_default_and_bounds(knob: str) -> None:
    field = DataSyncSettings.model_fields[knob]
    assert field.default == getattr(TransferSettings, knob)
    ge = next((m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)), None)
    le = next((m.le for m in field.metadata if isinstance(m, annotated_types.Le)), None)
    assert (ge, le) == (bounds(knob).least, bounds(knob).most)


@pytest.mark.parametrize("knob", sorted(k for k in OPTIONS if bounds(k).least is not None))
def test_the_engine_takes_a_knob_up_to_its_bounds_and_refuses_beyond(knob: str) -> None:
    limits = bounds(knob)
    TransferSettings(**{knob: limits.least})
    with pytest.raises(ValueError, match=f"{knob} must be at least {limits.least}"):
        TransferSettings(**{knob: limits.least - 1})
    if limits.most is not None:
        TransferSettings(**{knob: limits.most})
        with pytest.raises(ValueError, match=f"{knob} must be at most {limits.most}"):
            TransferSettings(**{knob: limits.most + 1})


def test_every_knob_a_plan_sets_reaches_the_engine(tmp_path: Path) -> None:
    tuned = {
        "threads": 7, "part_size": "9M", "multipart_threshold": "17M", "copy_threshold": "2G", "memory_budget": "97M",
        "bwlimit": "5M", "retry_budget_s": 60.0, "retries": 3, "checksum": True, "delete": True,
    }  # fmt: skip
    assert sorted(tuned) == PLAN_KNOBS
    plan = tmp_path / "plan.yaml"
    settings = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in tuned.items())
    plan.write_text(
        "name: knobs\n"
        'source: {storage: "s3://source-bucket/datasets"}\n'
        'target: {storage: "s3://target-bucket/datasets"}\n'
        f"phases:\n  data_sync: {{{settings}}}\n"
    )
    engine = open_phase(load_plan(plan), "data_sync").transfer_settings("train/")
    for knob, value in tuned.items():
        expected = units.parse_size(value) if knob in SIZES else value
        assert getattr(engine, knob) == expected != getattr(TransferSettings, knob), knob
    assert engine.prefix == "train/"

"""The commands package: shared options declared once, the policy list generated from the registry, lazy loading."""

import pytest

from msopt.cli import COMMANDS, load_command
from msopt.rules import POLICIES


def test_partition_help_lists_every_policy_from_the_registry(msopt):
    text = " ".join(msopt("partition", "--help").stdout.split())
    for name, (_, _, description) in POLICIES.items():
        assert f"{name} {' '.join(description.split())}" in text


@pytest.mark.parametrize("command", ["partition", "simulate", "visualize"])
def test_plan_options_are_shared_by_the_planning_commands(command):
    options = {opt for param in load_command(command).params for opt in param.opts}
    assert {
        "--streams",
        "--policy",
        "--target",
        "--batch-size",
        "--costs",
        "--boundary",
        "--rules",
        "--override",
        "--tags",
        "--json",
    } <= options


def test_every_command_loads_from_its_module():
    for name in COMMANDS:
        assert load_command(name).name == name

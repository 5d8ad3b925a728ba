"""``berth --help`` lists every command once, under the title of its group,
in the groups' order: one module of ``berth/cli/`` per group."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from berth.cli import GROUPS, build_parser, main


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def listed(help_text: str) -> dict[str, list[str]]:
    """The commands of each group's section of ``help_text``, by title."""
    groups: dict[str, list[str]] = {}
    epilog = help_text.split("show this help message and exit\n", 1)[1]
    for section in epilog.strip().split("\n\n"):
        title, *lines = section.splitlines()
        # a command's line starts two spaces in; its help's continuations further
        groups[title.rstrip(":")] = [m[1] for line in lines if (m := re.match(r"  (\S+)", line))]
    return groups


def test_help_lists_every_command_once_by_group(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # narrow: long helps wrap onto indented lines
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    groups = listed(capsys.readouterr().out)

    assert list(groups) == [
        "serve and workers",
        "OpenStack Placement",
        "publish and request",
        "providers and pools",
        "aggregates",
        "server groups",
        "scheduling policies, set at run time",
        "read side",
        "the view: replay, prune, migrate, checkpoint",
        "the log: verify, truncate, backup, restore",
        "demo",
    ]
    assert groups["read side"] == [
        "status",
        "queue",
        "dead-letters",
        "history",
        "explain",
        "headroom",
        "metrics",
    ]
    every = [name for names in groups.values() for name in names]
    parsers = commands(build_parser())
    assert sorted(every) == sorted(parsers)
    assert len(every) == len(set(every))
    # each group is one module of berth/cli/, which runs the commands it lists
    for names, module in zip(groups.values(), GROUPS, strict=True):
        assert {parsers[name].get_default("run").__module__ for name in names} == {module.__name__}


def test_python_m_berth_cli_is_the_command() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "berth.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert run.stdout.startswith("usage: berth ")
    assert "\nserve and workers:\n" in run.stdout

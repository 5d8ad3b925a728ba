"""The documentation is held to the code: every ``berth`` command line in
README.md and docs/*.md names commands and options the CLI has, every
``python -m`` module and ``make`` target exists, and every shell block marked
runnable runs (docs/README.md says how to mark one)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from berth.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
RUNNABLE = "<!-- runnable -->"
SHELLS = frozenset({"sh", "shell", "bash", "console"})
SEPARATORS = frozenset({"&&", "||", "|", ";", "&", "(", ")"})
REDIRECTS = frozenset({">", ">>", "<", ">&", "&>"})
PORT = "8480"
"""The port runnable blocks use; the test gives them a free one instead."""


@dataclass(frozen=True, slots=True)
class Block:
    """A fenced code block of a page."""

    where: str
    """``page:line`` of its opening fence."""
    lang: str
    text: str
    runnable: bool


def fenced(text: str, where: str) -> tuple[list[Block], str]:
    """The page's fenced blocks, and its prose with each block blanked out
    (line numbers kept). A fence closes at a line of at least as many
    backticks, so a block may show another (docs/README.md does)."""
    blocks: list[Block] = []
    prose: list[str] = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        opening = re.match(r"\s*(`{3,})(\w*)", lines[n])
        if opening is None:
            prose.append(lines[n])
            n += 1
            continue
        fence, lang = opening.groups()
        marked = any(line.strip() == RUNNABLE for line in lines[max(n - 1, 0) : n])
        body: list[str] = []
        start = n
        n += 1
        while n < len(lines) and not re.fullmatch(rf"\s*{fence}`*\s*", lines[n]):
            body.append(lines[n])
            n += 1
        n += 1
        prose.extend([""] * (n - start))
        blocks.append(Block(f"{where}:{start + 1}", lang, "\n".join(body) + "\n", marked))
    return blocks, "\n".join(prose)


def words(command: str) -> list[str]:
    """Shell words, with ``&&``, ``|``, ``>`` and the like as words of their
    own; ValueError while a quotation is still open."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def commands(block: Block) -> Iterator[list[str]]:
    """The simple commands of a shell block. In a ``console`` block only the
    lines after a ``$`` prompt are commands; the rest is their output. A
    command goes on past a trailing backslash or an open quotation."""
    pending = ""
    for line in block.text.splitlines():
        if not pending:
            if block.lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip():
                continue
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            found = words(pending)
        except ValueError:
            continue  # a quotation spans lines
        pending = ""
        yield from simple(found)
    assert not pending, f"{block.where}: an unfinished command: {pending!r}"


def simple(found: list[str]) -> Iterator[list[str]]:
    """``found`` split at separators, without redirections."""
    current: list[str] = []
    skip = False
    for word in found:
        if skip:
            skip = False
        elif word in SEPARATORS:
            if current:
                yield current
            current = []
        elif word in REDIRECTS:
            skip = True
        else:
            current.append(word)
    if current:
        yield current


def inline(prose: str) -> Iterator[list[str]]:
    """The commands in the prose's inline code (which may wrap lines)."""
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose):
        try:
            yield from simple(words(span.replace("\n", " ")))
        except ValueError:
            continue  # not a command: a quote in some other code


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def placeholder(name: str) -> bool:
    """``COMMAND``, ``bench.NAME``, ``...``: a word that stands for another."""
    return name.strip(".") == "" or any(part.isupper() for part in name.split("."))


def berth_problem(argv: list[str], root: argparse.ArgumentParser) -> str | None:
    """Why ``berth ARGV`` names a command or an option the CLI does not
    have, or None. A placeholder where a command goes (``berth COMMAND
    --help``) ends the check; words that are not options are not checked."""
    parser, path, rest = root, ["berth"], list(argv)
    while (choices := subparsers(parser)) is not None and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        if placeholder(name):
            return None
        if name not in choices:
            return f"`{' '.join(path)}` has no command {name!r} (it has {', '.join(choices)})"
        parser = choices[name]
        path.append(name)
    for word in rest:
        option = word.strip("[]").split("=", 1)[0].rstrip(",.")
        if re.fullmatch(r"--?[A-Za-z][\w-]*", option) and (
            option not in parser._option_string_actions
        ):
            return f"`{' '.join(path)}` has no option {option}"
    return None


def problems(page: str, text: str) -> list[str]:
    """Every command line of ``text`` (a page named ``page``) that names
    something that does not exist."""
    root = build_parser()
    targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    blocks, prose = fenced(text, page)
    found = [c for b in blocks if b.lang in SHELLS for c in commands(b)]
    found += list(inline(prose))
    wrong = []
    for command in found:
        program, args = Path(command[0]).name, command[1:]
        problem = None
        if program == "berth":
            problem = berth_problem(args, root)
        elif program.startswith("python") and args[:1] == ["-m"] and len(args) > 1:
            if not placeholder(args[1]) and importlib.util.find_spec(args[1]) is None:
                problem = f"no module {args[1]}"
        elif program == "make":
            missing = [t for t in args if not t.startswith("-") and t not in targets]
            problem = f"no make target {missing[0]}" if missing else None
        if problem is not None:
            wrong.append(f"{page}: {' '.join(command)}: {problem}")
    return wrong


def runnable() -> list[Block]:
    found = []
    for page in PAGES:
        blocks, _ = fenced(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())
        found += [b for b in blocks if b.runnable]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_the_docs_name_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert problems(page.name, text) == []


def test_the_check_finds_what_does_not_exist() -> None:
    page = "\n".join(
        [
            "Run `berth replay --verify --jobs\n2` or `berth frobnicate`.",
            "",
            "```sh",
            "berth provider register node-7 --wait  # fine",
            "berth provider evict node-7",
            "berth status --lag && berth history vm-1 --since 5",
            "python -m bench.nothing_here",
            "make demo docs",
            "```",
            "",
            "```console",
            "$ berth serve --api 127.0.0.1:8480 \\",
            "    --apii-token-file t &",
            "berth output --not-a-command",
            "```",
        ]
    )
    assert problems("page", page) == [
        "page: berth provider evict node-7: `berth provider` has no command 'evict' "
        "(it has register, inventory, state, traits, aggregates, describe, metrics, retire)",
        "page: berth history vm-1 --since 5: `berth history` has no option --since",
        "page: python -m bench.nothing_here: no module bench.nothing_here",
        "page: make demo docs: no make target docs",
        "page: berth serve --api 127.0.0.1:8480 --apii-token-file t: "
        "`berth serve` has no option --apii-token-file",
        "page: berth frobnicate: `berth` has no command 'frobnicate' (it has "
        + ", ".join(subparsers(build_parser()) or {})
        + ")",
    ]


def test_the_docs_have_runnable_blocks() -> None:
    where = [b.where for b in runnable()]
    assert any(w.startswith("README.md:") for w in where), where
    assert all(b.lang == "sh" for b in runnable())


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.where)
def test_a_runnable_block_runs(block: Block, tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "berth").exists(), "the berth command is not installed beside Python"
    script = tmp_path / "block.sh"
    script.write_text(block.text.replace(PORT, _free_port()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "TMPDIR": str(tmp_path)}
    output = tmp_path / "output"
    # into a file, not a pipe: a server the block left running would hold a
    # pipe open after the block has ended
    with output.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", str(script)],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=120)
        finally:
            # whatever the block left running in the background (a server it
            # could not stop because a command before failed) goes with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    assert process.returncode == 0, f"{block.where} failed:\n{output.read_text()}"

"""The documentation against the code: every CLI option and every `REMINDERS_*` variable is
documented, nothing documented is gone from the code, every benchmark figure in prose is the
one `bench/results/*.json` holds, and the examples that show a program's output (the replay
header, the hash-chain script) show what it prints today.

Other changes add commands, options and variables; each failure says exactly what is missing
and where to write it, so fixing it is a one-line edit of `docs/cli.md` or
`docs/configuration.md` (or, for figures, `python -m bench.docs`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from bench import docs as bench_docs
from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "cli.md"
#: A variable name; a trailing `_` is a family (`REMINDERS_NATS_*`), not a name.
VARIABLE = re.compile(r"\bREMINDERS_[A-Z0-9_]*[A-Z0-9]\b(?![_*])")
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SECTION = re.compile(r"^### `reminders ([a-z-]+)`\s*$", re.MULTILINE)
#: Where the code that reads variables lives (tests too: they read their own).
CODE_PATTERNS = (
    "*.py",
    "Dockerfile",
    "docker-compose.yml",
    "*.yaml",
    "*.yml",
    "*.conf",
    "*.toml",
)
THIS_FILE = Path(__file__).resolve()


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def doc_pages() -> list[Path]:
    return [path for path in tracked("*.md") if path.resolve() != THIS_FILE]


def commands() -> dict[str, Any]:
    """Every command of the `reminders` app by name (typer's own click types)."""
    group: Any = typer.main.get_command(app)
    return dict(group.commands)


def options_of(command: Any) -> set[str]:
    """Every spelling of every option, hidden ones included (`--nats-url`, `-o`, `--no-log`);
    a command group (`reminders hook`) has its subcommands' options, documented in its
    section."""
    own = {
        spelling
        for param in command.params
        if param.param_type_name == "option"
        for spelling in (*param.opts, *param.secondary_opts)
    }
    for sub in getattr(command, "commands", {}).values():
        own |= options_of(sub)
    return own


def cli_sections() -> dict[str, str]:
    """`### \\`reminders NAME\\`` section of docs/cli.md → its text."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    marks = list(SECTION.finditer(text))
    return {
        mark[1]: text[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        for i, mark in enumerate(marks)
    }


def test_every_command_and_option_is_documented_in_its_section_of_cli_md() -> None:
    sections = cli_sections()
    missing = []
    for name, command in sorted(commands().items()):
        if name not in sections:
            missing.append(
                f'`reminders {name}` (cli/) has no section "### `reminders {name}`" in docs/cli.md'
            )
            continue
        for option in sorted(options_of(command)):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", sections[name]):
                missing.append(
                    f"docs/cli.md, section `reminders {name}`: option {option} is not mentioned"
                )
    assert missing == [], "\n".join(missing)


def test_every_option_cli_md_documents_exists() -> None:
    known = commands()
    gone = []
    for name, text in sorted(cli_sections().items()):
        if name not in known:
            gone.append(f"docs/cli.md has a section for `reminders {name}`, which no longer exists")
            continue
        for option in sorted(set(LONG_OPTION.findall(text)) - options_of(known[name])):
            gone.append(
                f"docs/cli.md, section `reminders {name}`: {option} is not an option of "
                f"`reminders {name}`"
            )
    assert gone == [], "\n".join(gone)


def command_lines(text: str) -> list[tuple[str, str]]:
    """(command, its options as written) for every `reminders CMD …` in code spans and code
    blocks, a synopsis continued on indented lines included."""
    found = []
    spans = re.findall(r"```[^\n]*\n(.*?)```", text, re.DOTALL)
    spans += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
    for span in spans:
        joined = re.sub(r"\n\s+(?=[\[(-])", " ", span)
        for line in joined.splitlines():
            match = re.search(r"(?:^|[\s/])reminders ([a-z][a-z-]*)\b(.*)", line)
            if match:
                found.append((match[1], match[2].split("#")[0]))
    return found


def test_every_option_shown_with_a_command_anywhere_in_the_docs_exists() -> None:
    known = commands()
    wrong = []
    for page in doc_pages():
        for name, rest in command_lines(page.read_text(encoding="utf-8")):
            if name not in known:
                continue  # prose like "`reminders` command", or a bus op
            for option in sorted(set(LONG_OPTION.findall(rest)) - options_of(known[name])):
                wrong.append(
                    f"{page.relative_to(ROOT)}: `reminders {name} … {option}` — {option} is "
                    f"not an option of `reminders {name}`"
                )
    assert wrong == [], "\n".join(wrong)


def variables_in(paths: list[Path]) -> dict[str, str]:
    """Variable → the first `file:line` that names it."""
    seen: dict[str, str] = {}
    for path in paths:
        if path.resolve() == THIS_FILE:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in VARIABLE.findall(line):
                seen.setdefault(name, f"{path.relative_to(ROOT)}:{number}")
    return seen


def test_every_reminders_variable_in_the_code_is_documented() -> None:
    documented = variables_in(doc_pages())
    in_code = variables_in(tracked(*CODE_PATTERNS))
    missing = [
        f"{name} is read in {where} but no page documents it "
        "(add a row to docs/configuration.md, or docs/testing.md for a test's own variable)"
        for name, where in sorted(in_code.items())
        if name not in documented
    ]
    assert missing == [], "\n".join(missing)


def test_every_documented_reminders_variable_exists_in_the_code() -> None:
    in_code = variables_in(tracked(*CODE_PATTERNS))
    gone = [
        f"{where} documents {name}, which no code, test or deployment file names any more"
        for name, where in sorted(variables_in(doc_pages()).items())
        if name not in in_code
    ]
    assert gone == [], "\n".join(gone)


def test_benchmark_figures_in_the_docs_are_the_committed_results() -> None:
    stale = bench_docs.stale_blocks()
    assert stale == [], (
        "benchmark blocks that differ from bench/results/*.json (run `python -m bench.docs`): "
        + ", ".join(stale)
    )


def test_every_benchmark_block_has_a_renderer_and_every_renderer_a_block() -> None:
    used = bench_docs.used_blocks()
    assert sorted(set(used) - set(bench_docs.BLOCKS)) == [], used
    assert sorted(set(bench_docs.BLOCKS) - set(used)) == []


def test_a_block_is_rewritten_from_the_results_it_is_given() -> None:
    page = "x\n<!-- bench:begin fuzz -->\nold figures\n<!-- bench:end -->\ny\n"
    results = {
        "fuzz": {
            "short": {"inputs": 7, "generate_s": 1.5, "send_and_check_s": 2.0, "failures": 0},
            "long": {"inputs": 9, "generate_s": 3.0, "send_and_check_s": 4.0, "failures": 1},
        }
    }
    new = bench_docs.render_page(page, results.__getitem__)
    assert "old figures" not in new
    assert "short, 7 inputs, 1.5 s drawing" in new and "1 failures" in new
    assert new.startswith("x\n<!-- bench:begin fuzz -->\n")
    assert new.endswith("<!-- bench:end -->\ny\n")


def test_the_replay_example_shows_the_digest_replay_prints_today() -> None:
    from replay.engine import replay
    from replay.source import rows_from_file

    page = (ROOT / "docs" / "replay-and-audit.md").read_text(encoding="utf-8")
    shown = re.search(
        r"session golden-1: (\d+) event\(s\), session_seq \d+, state sha256 (\w+)", page
    )
    assert shown is not None, "docs/replay-and-audit.md lost its `--format text` example"
    result = replay(rows_from_file(ROOT / "tests/golden/basic_turns.events.jsonl", "golden-1"))
    assert (int(shown[1]), shown[2]) == (result.state.session_seq, result.digest), (
        "docs/replay-and-audit.md: the `--format text` example's header is stale; run "
        "`reminders replay golden-1 --from tests/golden/basic_turns.events.jsonl --format text`"
    )


def test_the_hash_chain_script_gives_what_its_page_shows(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "hash-chain.md").read_text(encoding="utf-8")
    (script_text,) = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    script = tmp_path / "verify_chain.py"
    script.write_text(script_text, encoding="utf-8")
    shown = re.findall(r"\$ python3 verify_chain.py (\S+)\n(.+)", page)
    assert len(shown) == 3, "docs/hash-chain.md lost its examples"
    for path, expected in shown:
        done = subprocess.run(
            [sys.executable, str(script), path], cwd=ROOT, capture_output=True, text=True
        )
        assert (done.returncode, done.stdout.strip()) == (0, expected), (
            f"docs/hash-chain.md: `python3 verify_chain.py {path}` now prints {done.stdout!r}"
        )


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks left out)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    headings = re.findall(r"^#+ (.*)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_to_a_section_finds_its_heading() -> None:
    broken = []
    for page in doc_pages():
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path, _, anchor = target.partition("#")
            if not anchor or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            linked = (page.parent / path).resolve() if path else page
            if linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)} -> {target}: no such heading")
    assert broken == [], "\n".join(broken)

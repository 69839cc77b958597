"""A clone stands alone: nothing it ships links or points outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Spelled in parts so that this file does not name them itself.
OUTSIDE_MARKERS = tuple(
    "/".join(parts) for parts in (("..", "shared"), ("shared", "SPEC.md"), ("shared", "reference"))
)
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed]


def test_every_relative_link_in_the_docs_resolves_to_a_file_inside_the_repository() -> None:
    broken = []
    for page in tracked("*.md"):
        for target in MARKDOWN_LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor on the same page
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_no_shipped_file_points_at_the_contract_outside_the_repository() -> None:
    outside = []
    for path in tracked("*.md", "*.py", "*.toml", "*.yml", "*.yaml", "*.conf", "Dockerfile"):
        text = path.read_text(encoding="utf-8")
        for marker in OUTSIDE_MARKERS:
            if marker in text:
                outside.append(f"{path.relative_to(ROOT)}: {marker}")
    assert outside == []


def test_the_readme_links_the_protocol_documentation() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/README.md)" in readme
    for page in ("subjects-and-streams", "events", "hash-chain", "commands", "rendering"):
        assert (ROOT / "docs" / f"{page}.md").exists(), page

"""The documentation site (mkdocs.yml over docs/) builds in strict mode: a broken link, a missing
anchor or a page left out of the nav fails the suite instead of a reader."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_documentation_site_builds_strictly(tmp_path):
    # mkdocs from the venv running the suite, so the lock's pinned version is the one that judges.
    mkdocs = Path(sys.executable).with_name("mkdocs")
    site = tmp_path / "site"
    run = subprocess.run([str(mkdocs), "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert (site / "index.html").is_file() and (site / "performance" / "index.html").is_file()
    assert (site / "img" / "writes.png").stat().st_size > 0   # the benchmark's plot, linked from bench/results

"""``tickwork.testing`` as a team uses it: the example handler tests, run by pytest in a
process of their own (the helpers themselves are tested in
tests/unit/test_handler_testing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_examples_handler_tests_pass() -> None:
    """``examples/test_handlers.py``, the tests a team copies, run as a team runs them."""
    root = Path(__file__).resolve().parents[1]
    options = ["-q", "-p", "no:cacheprovider", "-W", "ignore"]
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", *options, str(root / "examples" / "test_handlers.py")],
        capture_output=True,
        text=True,
        cwd=root,
        # Only pytest itself: the suite's plugins take seconds to load and are not needed.
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        timeout=60,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "5 passed" in finished.stdout

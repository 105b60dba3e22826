"""LAB_TEST_FAILURES: a failure's report reaches the file while the session runs (tests/conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path


def test_a_failure_is_written_to_the_file_as_it_happens(tmp_path: Path) -> None:
    tests = tmp_path / "test_two.py"
    tests.write_text("def test_fails():\n    assert 1 + 1 == 3, 'arithmetic'\n\n"
                     "def test_passes():\n    assert True\n")
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    failures = tmp_path / "failures.log"
    env = {**os.environ, "LAB_TEST_FAILURES": str(failures)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tests)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    text = failures.read_text()
    assert "FAILED test_two.py::test_fails (call" in text and "arithmetic" in text, text
    assert "test_passes" not in text

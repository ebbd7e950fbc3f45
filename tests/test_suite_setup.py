"""The test suite's own setup (tests/conftest.py): what keeps it fast stays pointed at real files."""

from conftest import ROOT, START_FIRST


def test_the_files_started_first_exist():
    """A renamed or removed file in START_FIRST would silently lose its head start."""
    for path in START_FIRST:
        assert (ROOT / path).is_file(), path

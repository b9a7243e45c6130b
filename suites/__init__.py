"""The qualification suites; installed as ``pytest_fabricqa.suites`` (see setup.py)."""

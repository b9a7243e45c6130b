"""Self-tests' shared helpers: importing this conftest puts tests/ on ``sys.path`` (pytest's default import
mode), so the unit and plugin tests import the one scripted host as ``from fakes import ScriptedHost``."""

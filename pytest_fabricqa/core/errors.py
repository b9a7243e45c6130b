"""The family of errors pytest-fabricqa raises on purpose.

Every error class of the package derives from :class:`FabricQAError`, so a caller (a user's suite, a CI
wrapper) can catch them all at once. Those that mean "the input is wrong, fix it" derive from
:class:`UserError`; plugin.py turns that branch, and only that branch, into pytest usage errors: one line,
no traceback, exit code 4. The others (a command failed on a host, the virtual lab did not boot, fio printed
no JSON) are failures of the lab or the run and keep pytest's usual error report.
"""

from __future__ import annotations


class FabricQAError(Exception):
    """Base of every error pytest-fabricqa raises on purpose."""


class UserError(FabricQAError):
    """Something the user must fix in what they gave: a lab file, an option, a results file, a setting.

    The message is one line that says what is wrong, where, and how to fix it.
    """

"""The one scripted host the unit tests share: a :class:`pytest_fabricqa.transport.base.Host` that answers from
a script instead of a machine, and records what it was asked to run.

A test gives the answers (recorded real output from ``tests/data``) and checks what ran::

    host = ScriptedHost("el72h1", lambda argv: (DATA / "lsdg_g.txt").read_text() if "lsdg" in argv else "")
    ...
    assert host.commands == [(...)]

An answer is the stdout of a command that succeeded (``str``), ``(exit code, stdout, stderr)``, or ``None`` for a
command the script does not expect, which fails the test. A non-zero exit raises :class:`CommandError` when the
caller asked for ``check``, as the real transports do, so a fake never lets a failure pass that a host would raise.
A test whose answers depend on state subclasses it and overrides :meth:`ScriptedHost.answer`.

tests/conftest.py puts this folder on ``sys.path``: ``from fakes import ScriptedHost``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_fabricqa.transport.base import CommandError, CommandResult

Answer = str | tuple[int, str, str] | None
Script = Callable[[tuple[str, ...]], Answer]


class ScriptedHost:
    """A host that answers each command from ``script`` and records every argv (and stdin) in order."""

    def __init__(self, name: str = "el72h1", script: Script | None = None) -> None:
        self.name = name
        self.script = script
        self.commands: list[tuple[str, ...]] = []
        self.stdins: list[str | None] = []
        self.closed = False

    def answer(self, argv: tuple[str, ...]) -> Answer:
        """What ``argv`` prints; a subclass overrides this when the answers depend on state."""
        if self.script is None:
            return ""
        return self.script(argv)

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None, stdin: str | None = None
    ) -> CommandResult:
        """Record ``argv`` and answer it; a non-zero exit raises under ``check`` as the real transports do."""
        args = tuple(argv)
        self.commands.append(args)
        self.stdins.append(stdin)
        answer = self.answer(args)
        if answer is None:
            raise AssertionError(f"{self.name}: the script has no answer for {args}")
        code, out, err = (0, answer, "") if isinstance(answer, str) else answer
        result = CommandResult(self.name, args, code, out, err)
        if check and code:
            raise CommandError(result)
        return result

    def close(self) -> None:
        """Nothing to release; remembered so a test can check the host was closed."""
        self.closed = True


def list_records(files: dict[str, str], folder: str) -> str:
    """What :func:`pytest_fabricqa.targets.remote.other_labs_records`'s listing prints for ``files``."""
    return "".join(
        f"{p}\t{t}\n" for p, t in sorted(files.items()) if p.startswith(folder + "/") and p.endswith(".json")
    )


def answer_files(files: dict[str, str], argv: tuple[str, ...]) -> Answer:
    """The plugin's small state files on a host with ``files`` (path -> text): its read (``cat`` if present), its
    atomic write (``mv -f`` of the text to the path) and its ``rm -f``; ``None`` for any other command."""
    script = argv[2] if argv[:2] == ("sh", "-c") else ""
    if script == '[ ! -e "$1" ] || cat "$1"':
        return files.get(argv[4], "")
    if script.startswith('for f in "$1"/*.json'):
        return list_records(files, argv[4])
    if "mv -f" in script:
        files[argv[5]] = argv[4]
        return ""
    if argv[:2] == ("rm", "-f"):
        files.pop(argv[2], None)
        return ""
    if 'until mkdir "$1"' in script and argv[4].endswith(".lock"):  # the fault records' lock: always free here
        return "TAKEN\n"
    if argv[0] == "rmdir" and argv[-1].endswith(".lock"):
        return ""
    return None

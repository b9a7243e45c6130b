"""Fan-out: one command on several hosts at once, every host's result kept even when some fail."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pytest_fabricqa.core.errors import FabricQAError
from pytest_fabricqa.transport.base import CommandResult, Host

T = TypeVar("T")


class GroupError(FabricQAError):
    """Some hosts failed. ``results`` maps every host name to its value or its exception."""

    def __init__(self, results: dict[str, object]) -> None:
        self.results = results
        failed = {name: r for name, r in results.items() if isinstance(r, BaseException)}
        lines = [f"{len(failed)} of {len(results)} hosts failed:"]
        lines += [f"- {exc}" for exc in failed.values()]
        super().__init__("\n".join(lines))

    @property
    def failed(self) -> dict[str, BaseException]:
        """The hosts that failed, with their exceptions."""
        return {name: r for name, r in self.results.items() if isinstance(r, BaseException)}


def each(hosts: Iterable[Host], work: Callable[[Host], T], *, check: bool = True) -> dict[str, T | BaseException]:
    """Call ``work(host)`` for every host in parallel; return host name -> result or exception.

    Raises :class:`GroupError` (carrying every result) only after every host finished, when ``check``.
    """
    host_list = list(hosts)
    results: dict[str, T | BaseException] = {}
    if not host_list:
        return results
    with ThreadPoolExecutor(max_workers=len(host_list)) as pool:
        futures = {host.name: pool.submit(work, host) for host in host_list}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as exc:
                results[name] = exc
    if check and any(isinstance(r, BaseException) for r in results.values()):
        raise GroupError(dict(results))
    return results


def run_all(
    hosts: Iterable[Host], argv: Sequence[str], *, check: bool = True, timeout: float | None = None
) -> dict[str, CommandResult | BaseException]:
    """Run one argv on every host at once (see :func:`each`)."""
    return each(hosts, lambda host: host.run(argv, check=True, timeout=timeout), check=check)

"""Where the test suite's time goes: a pytest plugin that charges each test module with the CPU
seconds the whole machine spent while its tests ran (setup, call and teardown), and prints the
modules that cost most.

    ./course test -n 0 -p benchmarks.suite_cpu [-m system]

One test at a time (`-n 0`), so that what the machine did in a test's time was that test's
doing: its servers, sandboxes, kernels and browsers included, which a process's own CPU time
would miss. Linux only (it reads /proc/stat).
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

TICK = os.sysconf("SC_CLK_TCK")
SHOWN = 15
_spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])   # module -> [CPU seconds, wall seconds]


def _busy() -> float:
    """CPU seconds the machine has spent so far, all cores: user, nice, system, irq and softirq."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / TICK


def _charged(item):
    busy, start = _busy(), time.monotonic()
    yield
    spent = _spent[item.nodeid.split("::")[0]]
    spent[0] += _busy() - busy
    spent[1] += time.monotonic() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _charged(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _charged(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _charged(item)


def pytest_terminal_summary(terminalreporter):
    if not _spent:
        return
    write = terminalreporter.write_line
    terminalreporter.section("CPU seconds per test module (the whole machine's, one test at a time)")
    ranked = sorted(_spent.items(), key=lambda kv: -kv[1][0])
    for module, (cpu, wall) in ranked[:SHOWN]:
        write(f"{cpu:8.1f} CPU-s {wall:8.1f} s  {module}")
    cpu, wall = (sum(v[i] for v in _spent.values()) for i in (0, 1))
    write(f"{cpu:8.1f} CPU-s {wall:8.1f} s  all {len(_spent)} modules")

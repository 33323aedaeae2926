"""Every CLI test sees the same plain, wide terminal, whatever the machine running it.

Rich wraps console output at $COLUMNS (80 when the output is not a terminal): a long temporary
path in a message, or a narrow CI terminal, would split the words a test looks for across
lines, and FORCE_COLOR would put escape codes between them. Tests check --json files, exit
codes and structured fields first; where they must read printed text they match it through
`flat`, so that even a message wrapped at word boundaries still matches.
"""

import pytest

TERMINAL_COLUMNS = 1000


@pytest.fixture(autouse=True)
def plain_wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1000-column terminal without colours, for the CliRunner and for child processes."""
    monkeypatch.setenv("COLUMNS", str(TERMINAL_COLUMNS))
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


def flat(text: str) -> str:
    """`text` with each run of whitespace (line breaks included) made one space."""
    return " ".join(text.split())

"""`herald keys rotate`'s progress: one line redrawn on a terminal, written once elsewhere."""

from __future__ import annotations

import io

from cli.keys import ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ended_once():
    out = Terminal()
    progress = ProgressLine("re-encrypting under k2", out)
    for done in (0, 500, 1000):
        progress(done, 1000)
    progress.close()
    drawn = out.getvalue()
    assert drawn.count("\n") == 1 and drawn.endswith("\n")
    assert drawn.split("\r")[1:] == [
        "re-encrypting under k2 [" + "." * 30 + "] 0/1000 (0%)",
        "re-encrypting under k2 [" + "#" * 15 + "." * 15 + "] 500/1000 (50%)",
        "re-encrypting under k2 [" + "#" * 30 + "] 1000/1000 (100%)\n",
    ]


def test_elsewhere_only_the_last_state_is_written():
    out = io.StringIO()
    progress = ProgressLine("re-encrypting under k2", out)
    progress(0, 0)  # nothing to do
    progress.close()
    assert out.getvalue() == "re-encrypting under k2 [" + "#" * 30 + "] 0/0 (100%)\n"

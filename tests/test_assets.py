"""The tiny model's and adapters' directories appear whole or not at all.

`conformance.assets._generate` writes into a private directory and renames it
into place, so processes that generate the assets at once (the test suites of
`make test`, local Ray workers) never read half of one: a complete directory
is kept, one left half-written is replaced, and a process that loses the race
drops its copy.
"""

from __future__ import annotations

from pathlib import Path

from lora_sched.conformance.assets import _generate


def _write(text: str):
    def write(d: Path) -> None:
        (d / "weights").write_text(text)
    return write


def test_a_complete_directory_is_kept(tmp_path: Path) -> None:
    dest = tmp_path / "model"
    _generate(dest, _write("first"))
    _generate(dest, _write("second"))
    assert (dest / "weights").read_text() == "first" and (dest / ".done").is_file()


def test_a_half_written_directory_is_replaced(tmp_path: Path) -> None:
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "weights").write_text("half")
    _generate(dest, _write("whole"))
    assert (dest / "weights").read_text() == "whole" and (dest / ".done").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_the_process_that_loses_the_race_drops_its_copy(tmp_path: Path) -> None:
    dest = tmp_path / "model"

    def write_while_another_finishes(d: Path) -> None:
        dest.mkdir()  # another process renames its whole copy into place first
        _write("winner")(dest)
        (dest / ".done").write_text("ok\n")
        (d / "weights").write_text("loser")

    _generate(dest, write_while_another_finishes)
    assert (dest / "weights").read_text() == "winner"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]

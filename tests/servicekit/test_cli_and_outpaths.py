"""The one-line command-line parser and the output-path probe every command shares."""

from __future__ import annotations

import pytest

from servicekit.cli import Parser
from servicekit.outpaths import check_writable


def test_a_usage_error_is_one_line_naming_the_command(capsys) -> None:
    p = Parser(prog="queuepilot thing")
    p.add_argument("--n", type=int, default=3, help="how many")
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--n", "x"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "queuepilot thing: argument --n: invalid int value: 'x' (see --help)\n"
    assert "(default: 3)" in p.format_help()


def test_the_probe_names_the_path_given_and_what_is_wrong(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for path, directory, message in (
        (blocker / "out", True, f"cannot write folder {blocker / 'out'}: {blocker} is not a folder"),
        (blocker / "deeper" / "r.json", False, f"cannot write file {blocker / 'deeper' / 'r.json'}: {blocker} is not a folder"),
        (tmp_path, False, f"cannot write file {tmp_path}: it is a folder"),
    ):
        with pytest.raises(ValueError) as e:
            check_writable(path, directory=directory)
        assert str(e.value) == message
    check_writable(tmp_path / "new" / "dir", directory=True)  # made, and writable
    assert (tmp_path / "new" / "dir").is_dir() and not list((tmp_path / "new" / "dir").iterdir())
    check_writable(tmp_path / "other" / "r.json", directory=False)
    assert (tmp_path / "other").is_dir() and not (tmp_path / "other" / "r.json").exists()

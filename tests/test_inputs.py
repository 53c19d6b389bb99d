"""The checked readers every command's input goes through: a refusal names the file and,
where there is one, the line; nothing waits on a file that never ends."""

from __future__ import annotations

import os
import time

import pytest

from testbed.inputs import InputError, converted, number, read_csv, read_json, reading


def test_a_named_pipe_or_a_folder_is_refused_at_once_not_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="fifo: a named pipe, not a regular file"):
        read_json(fifo)
    with pytest.raises(InputError, match="a folder, not a regular file"):
        read_json(tmp_path)
    with pytest.raises(InputError, match="nosuch.json: No such file"):
        read_json(tmp_path / "nosuch.json")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("text, expect, said", [
    ("[1, 2]", dict, "expected a JSON object, got array"),
    ('{"a": 1}', list, "expected a JSON array, got object"),
    ('{\n"a": NaN}', dict, "doc.json: not JSON (NaN is not a JSON number)"),
    ('{"a": 1,\n\n}', dict, ":3: not JSON"),
    ("[" * 100_000, list, "doc.json: not JSON (nested too deep)"),
])
def test_json_of_the_wrong_shape_or_no_json_names_the_file_and_line(tmp_path, text, expect,
                                                                     said):
    path = tmp_path / "doc.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_json(path, expect)
    assert str(err.value).startswith(str(path)) and said in str(err.value)


def test_a_file_past_its_size_or_not_utf8_is_named(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("{}" + " " * 100)
    with pytest.raises(InputError, match="more than the 10 expected"):
        read_json(path, max_bytes=10)
    path.write_bytes(b'{"a":\n"\xff"}')
    with pytest.raises(InputError, match=r"big.json:2: not UTF-8 text"):
        read_json(path)


def test_csv_rows_are_checked_against_the_header_and_a_huge_field_is_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n3\n")
    with pytest.raises(InputError, match=r"t.csv:3: 2 fields expected"):
        read_csv(path)
    with pytest.raises(InputError, match=r"t.csv:1: missing column\(s\) c"):
        read_csv(path, ("a", "c"))
    path.write_text("a,b\n" + "x" * 500_000 + ",2\n")  # past the csv module's default limit
    assert len(read_csv(path, ("a", "b"))[0]["a"]) == 500_000


def test_converted_rows_name_the_line_a_value_fails_on(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("id,arrival\nr1,0.5\nr2,abc\n")
    with pytest.raises(InputError, match=r"r.csv:3: could not convert"):
        converted(path, ("id", "arrival"), lambda r: float(r["arrival"]))


@pytest.mark.parametrize("raw", ["nan", "inf", float("inf"), "9" * 400 + ".0", True, [1],
                                 None, "x", -2, 11])
def test_a_number_outside_its_bounds_or_not_finite_is_named(raw):
    with pytest.raises(InputError, match="budget"):
        number(raw, "budget", 0, 10)
    assert number("2.5", "budget", 0, 10) == 2.5


def test_damage_in_a_folders_records_is_a_named_refusal_and_its_own_errors_pass():
    with pytest.raises(InputError, match=r"runs/a: damaged or foreign records \(KeyError"), \
            reading("runs/a"):
        {}["id"]
    with pytest.raises(InputError, match="^already named$"), reading("runs/a"):
        raise InputError("already named")

"""Files a user hands a command, read so that a bad one is refused by name: a regular file
only (a named pipe or a device would hang the read), of a bounded size, UTF-8, of the
shape expected, every failure an InputError naming the file, and the line or field where
there is one. Below every layer: records, predictions, calibrations and documents read
through it."""

from __future__ import annotations

import csv
import json
import math
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

MAX_BYTES = 4 << 30  # no record this project writes comes near it
csv.field_size_limit(sys.maxsize if sys.maxsize < 2**63 else 2**62)  # fields are bounded


class InputError(ValueError):
    """A file, option or record that cannot be used; the message names it and why."""


def regular_file(path: str | Path, max_bytes: int = MAX_BYTES) -> Path:
    """The path, if it is a regular file this process can read, of at most max_bytes."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a named pipe"
                if stat.S_ISFIFO(st.st_mode) else "a device or socket")
        raise InputError(f"{path}: {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise InputError(f"{path}: {st.st_size} bytes, more than the {max_bytes} expected")
    return path


def read_text(path: str | Path, max_bytes: int = MAX_BYTES) -> str:
    path = regular_file(path, max_bytes)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (a spreadsheet's CSV) dropped
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None


def read_json(path: str | Path, expect: type = dict, max_bytes: int = MAX_BYTES):
    """A JSON document of the type expected (dict: an object; list: an array)."""
    text = read_text(path, max_bytes)
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        where = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        said = getattr(exc, "msg", None) or ("nested too deep" if isinstance(exc, RecursionError)
                                             else str(exc))
        raise InputError(f"{path}{where}: not JSON ({said})") from None
    if not isinstance(doc, expect):
        raise InputError(f"{path}: expected a JSON {_kind(expect)}, got "
                         f"{_kind(type(doc))}")
    return doc


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _kind(t: type) -> str:
    return {dict: "object", list: "array", str: "string", int: "number", float: "number",
            bool: "boolean", type(None): "null"}.get(t, t.__name__)


def read_csv(path: str | Path, columns: tuple[str, ...] = (),
             max_bytes: int = MAX_BYTES) -> list[dict]:
    """Rows as dicts; every column named must be in the header, every row as long as it."""
    text = read_text(path, max_bytes)
    reader = csv.DictReader(text.splitlines(keepends=True))
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}")
        rows = []
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise InputError(f"{path}:{reader.line_num}: {len(header)} fields expected "
                                 "(the header's), the row has another number")
            rows.append(row)
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: {exc}") from None
    return rows


def number(raw, where: str, lo: float = -math.inf, hi: float = math.inf,
           integer: bool = False) -> float:
    """A finite number within [lo, hi] from a record's field, or an InputError naming it."""
    if isinstance(raw, bool):
        raise InputError(f"{where}: expected a number, got {raw!r}")
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}: expected {'an integer' if integer else 'a number'}, "
                         f"got {str(raw)[:40]!r}") from None
    if not (lo <= value <= hi) or (not integer and not math.isfinite(value)):  # NaN too
        raise InputError(f"{where}: {str(raw)[:40]} is not a finite number within "
                         f"[{lo:g}, {hi:g}]")
    return value


@contextmanager
def reading(what: str | Path):
    """Damage nobody foresaw in a finished folder's records (a missing key, a list where a
    number belongs) is an InputError naming the folder, not a crash: records are input."""
    try:
        yield
    except InputError:
        raise
    except (KeyError, TypeError, IndexError, AttributeError, StopIteration, ValueError,
            OverflowError, ZeroDivisionError, csv.Error, RecursionError) as exc:
        if type(exc).__module__.startswith("testbed."):
            raise  # this project's own errors name what is wrong already
        raise InputError(f"{what}: damaged or foreign records ({type(exc).__name__}: "
                         f"{str(exc)[:200]}); is it a finished folder of this version?"
                         ) from exc


def converted(path: str | Path, columns: tuple[str, ...], convert) -> list:
    """read_csv's rows each through `convert`; a value it cannot take names its line."""
    out = []
    for line, row in enumerate(read_csv(path, columns), start=2):
        try:
            out.append(convert(row))
        except InputError:
            raise
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise InputError(f"{path}:{line}: {_short(exc)}") from None
    return out


def _short(exc: Exception) -> str:
    """A conversion's complaint in one line (pydantic's first error, with its field)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        return f"{field}: {first.get('msg')} (got {str(first.get('input'))[:40]!r})"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__

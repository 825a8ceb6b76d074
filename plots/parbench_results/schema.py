"""What docs/JSON.md defines, for every reader of parbench's JSON: a file read (FILE.json, or
FILE.json.gz read as it is) and its schema version checked, Google Benchmark's time units, case
names without the suffixes Google Benchmark appends, a training case's fields and the context's
order of strategies and schedules.

Standard library only, and Python 3.7 syntax: the regression gate imports it (docs/PERF_GATE.md).
"""
from __future__ import annotations

import gzip
import json
import os
import stat
import zlib

KNOWN_SCHEMA_MAJOR = 1
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}  # Google Benchmark's time_unit

# Path elements Google Benchmark appends to a registered name: flags, and key:value settings.
_GBENCH_FLAGS = {"manual_time", "real_time", "process_time"}
_GBENCH_KEYS = {"iterations", "repeats", "min_time", "min_warmup_time", "threads"}

# A file whose name ends so is gzip-compressed and read decompressed (a raw run kept small).
GZIP_SUFFIX = ".gz"
_GZIP_CHUNK = 1 << 20  # decompressed bytes taken at a time: memory stays near max_bytes whatever the file


class ResultsError(Exception):
    """A file that cannot be read as parbench output; the message names the file."""


def read_text(path: str, max_bytes: int | None = None) -> str:
    """A regular file's text, UTF-8. Anything else (a FIFO, which would wait for a writer; a
    device such as /dev/zero, which never ends; a folder) is refused without reading it, and so
    is a file of more than max_bytes. A name ending in .gz is decompressed as it is read, and
    max_bytes holds for the decompressed text too: reading stops once it is passed."""
    try:
        # Opening a FIFO without O_NONBLOCK waits for a writer: open it non-blocking, then refuse it.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ResultsError(f"{path}: cannot read: {error}") from None
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ResultsError(f"{path}: not a regular file (a FIFO, device or folder): only files are read")
        if max_bytes is not None and status.st_size > max_bytes:
            raise ResultsError(f"{path}: {status.st_size} bytes, more than the {max_bytes} this reader takes")
        if str(path).endswith(GZIP_SUFFIX):
            data = _decompressed(file, path, max_bytes)
        else:
            try:
                data = file.read() if max_bytes is None else file.read(max_bytes + 1)
            except OSError as error:
                raise ResultsError(f"{path}: cannot read: {error}") from None
    if max_bytes is not None and len(data) > max_bytes:  # it grew while being read
        raise ResultsError(f"{path}: more than the {max_bytes} bytes this reader takes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultsError(f"{path}: cannot read: {error}") from None


def _decompressed(file, path: str, max_bytes: int | None) -> bytes:
    """A gzip file's content, taken a chunk at a time so that a file which decompresses to far
    more than max_bytes (a gzip bomb) is refused having held little more than max_bytes."""
    parts, total = [], 0
    try:
        with gzip.GzipFile(fileobj=file, mode="rb") as archive:
            while True:
                wanted = _GZIP_CHUNK if max_bytes is None else min(_GZIP_CHUNK, max_bytes + 1 - total)
                chunk = archive.read(wanted)
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise ResultsError(f"{path}: more than the {max_bytes} bytes this reader takes, decompressed")
    except (OSError, EOFError, zlib.error) as error:  # not gzip, truncated, a bad checksum or stream
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ResultsError(f"{path}: cannot decompress: {message}") from None
    return b"".join(parts)


def read_document(path: str, max_bytes: int | None = None) -> dict:
    """The file's JSON, checked to be Google Benchmark output written by parbench with a schema
    of the major version this reader knows and at least one benchmark. Only a regular file is
    read, of at most max_bytes where given."""
    text = read_text(path, max_bytes)
    if not text.strip():
        raise ResultsError(f"{path}: empty file")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not valid JSON: {error}") from None
    except RecursionError:
        raise ResultsError(f"{path}: not usable JSON: nested too deeply to read") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise ResultsError(f"{path}: not usable JSON: {str(error).splitlines()[0]}") from None
    if not (isinstance(document, dict) and isinstance(document.get("context"), dict)
            and isinstance(document.get("benchmarks"), list)):
        raise ResultsError(f"{path}: not Google Benchmark JSON (needs a 'context' object and a 'benchmarks' list)")
    version = document["context"].get("parbench_json_schema")
    if not isinstance(version, str):
        raise ResultsError(f"{path}: no context.parbench_json_schema: not parbench output")
    major = version.split(".")[0]
    if not major.isdigit():
        raise ResultsError(f"{path}: parbench_json_schema {version!r} is not a semver version")
    if int(major) != KNOWN_SCHEMA_MAJOR:
        raise ResultsError(f"{path}: parbench_json_schema {version} has major version {major}; "
                           f"this reader knows major version {KNOWN_SCHEMA_MAJOR}")
    if not document["benchmarks"]:
        raise ResultsError(f"{path}: no benchmarks")
    return document


def name_parts(run_name: str) -> list:
    """The case name's path elements: the run name without Google Benchmark's suffixes
    (/iterations:N, /manual_time, ...), so runs with different iteration counts compare."""
    parts = run_name.split("/")
    while len(parts) > 1 and _appended_by_gbench(parts[-1]):
        parts.pop()
    return parts


def case_name(run_name: str) -> str:
    return "/".join(name_parts(run_name))


def _appended_by_gbench(part: str) -> bool:
    key, colon, _ = part.partition(":")
    return part in _GBENCH_FLAGS or bool(colon and key in _GBENCH_KEYS)


def key_values(parts: list) -> dict:
    """A name's key:value path elements as a dict; ValueError names one that is not key:value."""
    found = {}
    for part in parts:
        key, colon, value = part.partition(":")
        if not colon or not key or not value:
            raise ValueError(f"component '{part}' is not key:value")
        found[key] = value
    return found


def case_fields(entry: dict) -> dict:
    """A train/ case's fields, each value a string as in its name, strategy and model first: the
    entry's `fields` object (schema 1.4.0 on), else its name parsed, for older files (strategy
    and model are its second and third path elements, the rest key:value). ValueError says what
    is malformed."""
    if "fields" in entry:
        return _fields_object(entry["fields"])
    parts = name_parts(entry["run_name"])
    if len(parts) < 3:
        raise ValueError(f"name '{entry['run_name']}' has no model")
    fields = {"strategy": parts[1], "model": parts[2]}
    try:
        fields.update(key_values(parts[3:]))
    except ValueError as error:
        raise ValueError(f"name '{entry['run_name']}': {error}") from None
    return fields


def _fields_object(fields) -> dict:
    if not isinstance(fields, dict):
        raise ValueError("'fields' is not an object")
    for key in ("strategy", "model"):
        if not (isinstance(fields.get(key), str) and fields[key]):
            raise ValueError(f"'fields' has no '{key}' string")
    as_text = {}
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"'fields' value {key}: {value!r} is neither a string nor a number")
        as_text[key] = value if isinstance(value, str) else _number_text(value)
    return as_text


def _number_text(value) -> str:
    """A number as a name writes it: 120, not 120.0."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def listed_order(context: dict, key: str):
    """The context's comma-separated list under key (`strategies`: the registry's listing order,
    `schedules`: the schedule table's; schema 1.4.0) as a tuple, or None where it is absent."""
    listed = context.get(key)
    return tuple(name for name in listed.split(",") if name) if isinstance(listed, str) else None

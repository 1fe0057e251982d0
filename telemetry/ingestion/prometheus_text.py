"""Parser for the Prometheus text exposition format (0.0.4) as served by
dcgm-exporter and node_exporter scrapes.

``parse_exposition(text, default_ts_ms=...)`` turns one scrape body into a list
of ``PromSample`` (metric name, sorted label pairs, value, timestamp in ms).
Samples without a timestamp get ``default_ts_ms`` (the scrape time): exporters
normally omit it.

Accepted: ``# HELP`` / ``# TYPE`` lines and free comments, label values with the
``\\\\``, ``\\"`` and ``\\n`` escapes, a trailing comma inside ``{}``, quoted
(UTF-8) label names and the quoted metric name form ``{"a.b", x="1"}``, an
optional integer millisecond timestamp, ``NaN`` / ``+Inf`` / ``-Inf``, histogram
and summary suffixes, blank lines, surrounding blanks/tabs, ``\\r\\n`` line ends,
and the OpenMetrics ``# EOF`` terminator (and exemplars after `` # ``).
Lenient on purpose: a repeated identical ``# TYPE`` (concatenated scrapes) and a
missing final newline. Any other malformed line raises ``IngestError`` with its
1-based line number, the field and the reason.

Speed: the text of a line up to its last ``}`` (name and label body) is parsed
once per distinct string and cached at module level (the same strings come back
in every scrape of the same exporter), so a repeat line costs one dict lookup
and a small regex on the value; new lines go through one precompiled regex. Anything the fast path
does not accept is re-parsed by a careful character scanner, which is the
authority on what is valid and produces the error messages.
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple

from telemetry.ingestion.errors import IngestError


class PromSample(NamedTuple):
    name: str
    labels: tuple[tuple[str, str], ...]  # sorted by label name
    value: float
    ts_ms: int


_METRIC_TYPES = frozenset(
    # Prometheus 0.0.4 types, plus the OpenMetrics ones so `# EOF` texts parse.
    {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset", "gaugehistogram"}
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_HEAD_CACHE_MAX = 200_000

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_FAST_LINE = re.compile(
    rf"({_NAME})(?:\{{([^{{}}]*)\}})?[ \t]+([-+.0-9a-zA-Z]+)(?:[ \t]+(-?[0-9]+))?[ \t\r]*"
).fullmatch
_FAST_REST = re.compile(r"[ \t]+([-+.0-9a-zA-Z]+)(?:[ \t]+(-?[0-9]+))?[ \t\r]*").fullmatch
_FAST_PAIR = re.compile(rf'[ \t]*({_LNAME})[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,[ \t]*|$)').match
_NAME_AT = re.compile(_NAME).match
_LNAME_AT = re.compile(_LNAME).match
_NAME_FULL = re.compile(_NAME).fullmatch
_TS_FULL = re.compile(r"[+-]?[0-9]+").fullmatch
_ESCAPE = re.compile(r"\\(.?)", re.S)
_BLANKS = re.compile(r"[ \t]+")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}

# "name{label body" -> (name, sorted labels); shared across calls (same exporter,
# same strings every scrape) and cleared when it grows past _HEAD_CACHE_MAX.
_head_cache: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}


def parse_exposition(text: str, *, default_ts_ms: int) -> list[PromSample]:
    """Parse one exposition body; raise ``IngestError`` on the first bad line."""
    out: list[PromSample] = []
    append = out.append
    head_cache = _head_cache
    head_get = head_cache.get
    fast_line = _FAST_LINE
    fast_rest = _FAST_REST
    new = tuple.__new__
    cls = PromSample
    types: dict[str, str] = {}
    eof_line = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        # Fastest path: the text up to the last '}' (metric name + label body) was
        # seen before, so only the value (and timestamp) remain to be read.
        j = line.rfind("}")
        if j > 0 and not eof_line:
            head = head_get(line[:j])
            if head is not None:
                m = fast_rest(line, j + 1)
                if m is not None:
                    vtok, tstok = m.groups()
                    value = _fast_float(vtok)
                    if value is not None:
                        if tstok is None:
                            append(new(cls, (head[0], head[1], value, default_ts_ms)))
                            continue
                        ts = int(tstok)
                        if _INT64_MIN <= ts <= _INT64_MAX:
                            append(new(cls, (head[0], head[1], value, ts)))
                            continue
        m = fast_line(line)
        if m is not None and not eof_line:
            name, lstr, vtok, tstok = m.groups()
            if lstr is None:
                labels: tuple | None = ()
            else:
                labels = _fast_labels(lstr)
                if labels is not None:
                    if len(head_cache) >= _HEAD_CACHE_MAX:
                        head_cache.clear()
                    # With a fast-line match the last '}' closes the label body.
                    head_cache[line[:j]] = (name, labels)
            value = _fast_float(vtok)
            if labels is not None and value is not None:
                if tstok is None:
                    append(new(cls, (name, labels, value, default_ts_ms)))
                    continue
                ts = int(tstok)
                if _INT64_MIN <= ts <= _INT64_MAX:
                    append(new(cls, (name, labels, value, ts)))
                    continue
            # Fall through: the careful scanner either accepts it or explains why not.
        stripped = line.strip(" \t\r")
        if not stripped:
            continue
        if eof_line:
            raise IngestError(f"content after '# EOF' (line {eof_line})", line=lineno)
        if stripped[0] == "#":
            if _comment(stripped, lineno, types):
                eof_line = lineno
            continue
        append(_parse_sample_slow(stripped, lineno, default_ts_ms))
    return out


class Unsupported(Exception):
    """``scan_exposition`` cannot vouch for this body: ``parse_exposition`` must decide (and explain)."""


# float() also takes these; the exposition format does not (blank before the value is checked apart).
_REST_ODD = re.compile(r"[_\x0b\x0c\x1c-\x1f]").search
_REST_NO_BLANK = re.compile(r"\n[^ \t]").search
# Comment line text -> _comment_info(); same strings every scrape.
_comment_cache: dict[str, tuple[str, str] | None] = {}
_COMMENT_CACHE_MAX = 100_000


def scan_exposition(
    text: str,
    *,
    default_ts_ms: int,
    heads: dict[str, int],
    names: dict[str, int],
    intern: Callable[[str, tuple[tuple[str, str], ...]], int],
) -> tuple[list[int], list[float], list[tuple[int, int]]]:
    """``parse_exposition`` for callers that want a series number per sample, fast.

    ``intern(name, labels)`` numbers a series (it may raise ``IngestError``);
    ``heads`` maps the text of a line up to its last ``}`` and ``names`` a bare
    metric name to that number, and are filled here from lines the reference
    grammar accepted. Returns (series number per sample, value per sample,
    ``(sample index, ts)`` for samples carrying their own timestamp; the others
    have ``default_ts_ms``): the samples ``parse_exposition`` would return, in
    its order. Raises ``Unsupported`` for anything it does not handle itself
    (bad input, ``# EOF``); ``parse_exposition`` then gives the answer or the
    error with its line number.
    """
    ids: list[int] = []
    values: list[float] = []
    stamps: list[tuple[int, int]] = []
    rests: list[str] = []  # value text taken by float(): checked in bulk below
    bare_rests: list[str] = []
    id_append, value_append, rest_append = ids.append, values.append, rests.append
    head_get, name_get = heads.get, names.get
    comments = _comment_cache
    comment_get = comments.get
    types: dict[str, str] = {}
    for line in text.split("\n"):
        # Per sample: one split at the last '}', one dict lookup, one float().
        head, _, rest = line.rpartition("}")
        sid = head_get(head)
        if sid is not None:
            try:
                value_append(float(rest))
            except ValueError:
                m = _FAST_REST(rest)  # "value timestamp": as parse_exposition's own cached path
                if m is None:
                    sid = None
                else:
                    value = _fast_float(m.group(1))
                    tstok = m.group(2)
                    ts = default_ts_ms if tstok is None else int(tstok)
                    if value is None or not _INT64_MIN <= ts <= _INT64_MAX:
                        sid = None
                    else:
                        if tstok is not None:
                            stamps.append((len(ids), ts))
                        value_append(value)
                        id_append(sid)
                        continue
            else:
                id_append(sid)
                rest_append(rest)
                continue
        elif not head:
            if line[:1] == "#":  # HELP/TYPE: a fifth of a dcgm-exporter scrape
                info = comment_get(line, False)
                if info is None:
                    continue
                if info is not False and info is not _EOF:
                    if types.setdefault(info[0], info[1]) != info[1]:
                        raise Unsupported
                    continue
            name, _, rest = line.partition(" ")
            sid = name_get(name)
            if sid is not None:
                try:
                    value_append(float(rest))
                except ValueError:
                    sid = None
                else:
                    id_append(sid)
                    bare_rests.append(rest)
                    continue
        if not line:
            continue
        info = comment_get(line, False)
        if info is False:
            stripped = line.strip(" \t\r")
            if not stripped:
                continue
            if stripped[0] != "#":
                sample, key = _sample_line(line, stripped, default_ts_ms)
                try:
                    sid = intern(sample.name, sample.labels)
                except IngestError:
                    raise Unsupported from None  # e.g. no host: reported after the whole body parsed
                if key is not None:
                    (heads if key else names)[key or sample.name] = sid
                if sample.ts_ms != default_ts_ms:
                    stamps.append((len(ids), sample.ts_ms))
                id_append(sid)
                value_append(sample.value)
                continue
            try:
                info = _comment_info(stripped, 0)
            except IngestError:
                raise Unsupported from None
            if info is _EOF:
                raise Unsupported  # what may follow '# EOF' is parse_exposition's business
            if len(comments) >= _COMMENT_CACHE_MAX:
                comments.clear()
            comments[line] = info
        if info is not None:
            name, mtype = info
            if types.setdefault(name, mtype) != mtype:
                raise Unsupported
    for checked, need_blank in ((rests, True), (bare_rests, False)):
        if checked:
            joined = "\n".join(checked)
            if not joined.isascii() or _REST_ODD(joined) or (need_blank and _REST_NO_BLANK("\n" + joined)):
                raise Unsupported
    return ids, values, stamps


def _sample_line(line: str, stripped: str, default_ts_ms: int) -> tuple[PromSample, str | None]:
    """One sample line as ``parse_exposition`` reads it, plus the key under which the
    line's series may be found again: its text up to the last ``}``, '' for a bare
    name (then the name is the key), None when it is not safe to reuse."""
    m = _FAST_LINE(line)
    if m is not None:
        name, lstr, vtok, tstok = m.groups()
        labels = () if lstr is None else _fast_labels(lstr)
        value = _fast_float(vtok)
        if labels is not None and value is not None:
            ts = default_ts_ms if tstok is None else int(tstok)
            if _INT64_MIN <= ts <= _INT64_MAX:
                return PromSample(name, labels, value, ts), ("" if lstr is None else line[: line.rfind("}")])
    try:
        return _parse_sample_slow(stripped, 0, default_ts_ms), None
    except IngestError:
        raise Unsupported from None


def _fast_float(tok: str) -> float | None:
    # Python's float() also takes "1_000"; Go's ParseFloat does not.
    if "_" in tok:
        return None
    try:
        return float(tok)
    except ValueError:
        return None


def _fast_labels(lstr: str) -> tuple[tuple[str, str], ...] | None:
    """Labels of a ``{...}`` body in the plain form; None sends the line to the slow path."""
    pairs: dict[str, str] = {}
    pos, n = 0, len(lstr)
    while pos < n:
        m = _FAST_PAIR(lstr, pos)
        if m is None:
            return None
        lname, value = m.groups()
        if "\\" in value:
            value = _unescape_or_none(value)
            if value is None:
                return None
        if lname in pairs:
            return None
        pairs[lname] = value
        pos = m.end()
    return tuple(sorted(pairs.items()))


def _unescape_or_none(value: str) -> str | None:
    try:
        return _ESCAPE.sub(lambda m: _UNESCAPE[m.group(1)], value)
    except KeyError:
        return None


def _comment(s: str, lineno: int, types: dict[str, str]) -> bool:
    """Check a ``#`` line; True when it is the OpenMetrics ``# EOF`` marker."""
    info = _comment_info(s, lineno)
    if info is None:
        return False
    if info is _EOF:
        return True
    name, mtype = info
    seen = types.get(name)
    if seen is not None and seen != mtype:
        raise IngestError(
            f"metric {name!r} declared {mtype!r} but was already declared {seen!r}", line=lineno, field="TYPE"
        )
    types[name] = mtype
    return False


_EOF = ("", "EOF")  # _comment_info's answer for the `# EOF` marker


def _comment_info(s: str, lineno: int) -> tuple[str, str] | None:
    """What a ``#`` line says on its own: ``(name, type)`` for ``# TYPE``, ``_EOF``,
    or None (HELP, free comment). Checks everything but the agreement with
    earlier ``# TYPE`` lines, so the answer can be cached per line text."""
    body = s[1:].lstrip(" \t")
    if body == "EOF":
        return _EOF
    keyword = body[:4]
    if keyword not in ("HELP", "TYPE") or (len(body) > 4 and body[4] not in " \t"):
        return None  # a free comment (e.g. "# NOTE ..." in real fixtures)
    rest = body[4:].lstrip(" \t")
    if not rest:
        raise IngestError(f"# {keyword} line without a metric name", line=lineno, field=keyword)
    name, after = _comment_name(rest, lineno, keyword)
    if keyword == "HELP":
        if after and after[0] not in " \t":
            raise IngestError(f"invalid metric name in # HELP: {rest!r}", line=lineno, field="HELP")
        if "\\" in re.sub(r"\\[\\n]", "", after):
            raise IngestError(
                "invalid escape in HELP text (only \\\\ and \\n are allowed)",
                line=lineno,
                field="HELP",
            )
        return None
    tokens = _BLANKS.split(after.strip(" \t")) if after.strip(" \t") else []
    if len(tokens) != 1 or (after and after[0] not in " \t"):
        raise IngestError(
            f"# TYPE needs exactly a metric name and a type, got {s!r}", line=lineno, field="TYPE"
        )
    mtype = tokens[0]
    if mtype not in _METRIC_TYPES:
        raise IngestError(
            f"unknown metric type {mtype!r} (expected one of counter, gauge, histogram, summary, untyped)",
            line=lineno,
            field="TYPE",
        )
    return name, mtype


def _comment_name(rest: str, lineno: int, keyword: str) -> tuple[str, str]:
    if rest[0] == '"':
        return _read_quoted(rest, 0, lineno, keyword)
    m = _NAME_AT(rest)
    if m is None:
        raise IngestError(f"invalid metric name in # {keyword}: {rest[:60]!r}", line=lineno, field=keyword)
    return m.group(), rest[m.end() :]


def _read_quoted(s: str, pos: int, lineno: int, field: str) -> tuple[str, str] | tuple[str, int]:
    """Read a double-quoted escaped string starting at ``s[pos] == '"'``.

    Returns (text, remainder) when called for comments, where callers slice;
    the sample scanner uses ``_read_quoted_at`` for positions.
    """
    text, end = _read_quoted_at(s, pos, lineno, field)
    return text, s[end:]


def _read_quoted_at(s: str, pos: int, lineno: int, field: str) -> tuple[str, int]:
    i = pos + 1
    n = len(s)
    parts: list[str] = []
    start = i
    while i < n:
        c = s[i]
        if c == '"':
            parts.append(s[start:i])
            return "".join(parts), i + 1
        if c == "\\":
            parts.append(s[start:i])
            esc = s[i + 1 : i + 2]
            if esc not in _UNESCAPE:
                shown = "\\" + esc if esc else "\\ at end of line"
                raise IngestError(
                    f"invalid escape {shown!r} in quoted string (allowed: \\\\, \\\", \\n)",
                    line=lineno,
                    field=field,
                )
            parts.append(_UNESCAPE[esc])
            i += 2
            start = i
            continue
        i += 1
    raise IngestError("unterminated quoted string (missing closing '\"')", line=lineno, field=field)


def _skip_blanks(s: str, pos: int) -> int:
    n = len(s)
    while pos < n and s[pos] in " \t":
        pos += 1
    return pos


def _parse_sample_slow(s: str, lineno: int, default_ts_ms: int) -> PromSample:
    """Full EBNF scanner for one (stripped, non-comment) sample line."""
    n = len(s)
    pos = 0
    name: str | None = None
    if s[0] != "{":
        m = _NAME_AT(s)
        if m is None:
            raise IngestError(f"invalid metric name at start of {s[:60]!r}", line=lineno, field="metric_name")
        name = m.group()
        pos = m.end()
    labels: dict[str, str] = {}
    after_name = _skip_blanks(s, pos)
    if after_name < n and s[after_name] == "{":  # Go's parser allows blanks before '{'
        pos = after_name
    if pos < n and s[pos] == "{":
        pos += 1
        first = True
        while True:
            pos = _skip_blanks(s, pos)
            if pos >= n:
                raise IngestError("label set not closed (missing '}')", line=lineno, field="labels")
            if s[pos] == "}":
                pos += 1
                break
            if s[pos] == '"':
                text, pos = _read_quoted_at(s, pos, lineno, "labels")
                pos = _skip_blanks(s, pos)
                if first and pos < n and s[pos] in ",}":
                    # `{"dotted.metric.name", ...}`: the quoted name form.
                    if name is not None:
                        raise IngestError(
                            f"metric name given twice ({name!r} and {text!r})", line=lineno, field="metric_name"
                        )
                    name = text
                    first = False
                    if s[pos] == ",":
                        pos += 1
                    continue
                lname = text
            else:
                m = _LNAME_AT(s, pos)
                if m is None:
                    raise IngestError(
                        f"expected a label name at {s[pos:pos + 20]!r}", line=lineno, field="labels"
                    )
                lname = m.group()
                pos = m.end()
            first = False
            pos = _skip_blanks(s, pos)
            if pos >= n or s[pos] != "=":
                raise IngestError(f"expected '=' after label name {lname!r}", line=lineno, field=f"label {lname}")
            pos = _skip_blanks(s, pos + 1)
            if pos >= n or s[pos] != '"':
                raise IngestError(
                    f"value of label {lname!r} must be a double-quoted string", line=lineno, field=f"label {lname}"
                )
            value, pos = _read_quoted_at(s, pos, lineno, f"label {lname}")
            if lname in labels:
                raise IngestError(f"duplicate label name {lname!r}", line=lineno, field=f"label {lname}")
            labels[lname] = value
            pos = _skip_blanks(s, pos)
            if pos < n and s[pos] == ",":
                pos += 1
                continue
            if pos < n and s[pos] == "}":
                pos += 1
                break
            raise IngestError(
                f"expected ',' or '}}' after the value of label {lname!r}", line=lineno, field="labels"
            )
    if name is None:
        raise IngestError("sample has no metric name", line=lineno, field="metric_name")
    rest = s[pos:]
    if not rest:
        raise IngestError(f"sample {name!r} has no value", line=lineno, field="value")
    if rest[0] not in " \t":
        raise IngestError(
            f"unexpected {rest[:20]!r} after metric name {name!r} (expected blank then value)",
            line=lineno,
            field="metric_name",
        )
    if " # " in rest or "\t# " in rest:
        rest = re.split(r"[ \t]#[ \t]", rest, maxsplit=1)[0]  # OpenMetrics exemplar
    tokens = [t for t in _BLANKS.split(rest.strip(" \t")) if t]
    if not tokens:
        raise IngestError(f"sample {name!r} has no value", line=lineno, field="value")
    if len(tokens) > 2:
        raise IngestError(f"unexpected text after the timestamp: {' '.join(tokens[2:])[:40]!r}", line=lineno)
    value = _parse_value(tokens[0], lineno)
    ts = default_ts_ms
    if len(tokens) == 2:
        ttok = tokens[1]
        if not _TS_FULL(ttok):
            raise IngestError(
                f"timestamp must be integer milliseconds, got {ttok!r}", line=lineno, field="timestamp"
            )
        ts = int(ttok)
        if not _INT64_MIN <= ts <= _INT64_MAX:
            raise IngestError(f"timestamp out of int64 range: {ttok!r}", line=lineno, field="timestamp")
    return PromSample(name, tuple(sorted(labels.items())), value, ts)


def _parse_value(tok: str, lineno: int) -> float:
    # Python's float() also takes "1_000" and unicode digits; Go's ParseFloat does not.
    if "_" not in tok and tok.isascii():
        try:
            return float(tok)
        except ValueError:
            pass
    raise IngestError(f"not a number: {tok!r}", line=lineno, field="value")


# --- per-host templates: a steady scrape parses only its values ------------------------------
#
# An exporter serves the same lines in the same order every scrape; only the values change.
# ``template_of`` records, from a body ``scan_exposition`` accepted, where each sample line's
# value starts (its *head*: everything before the value, blanks included) and a digest of every
# byte that is not a sample's value text. ``template_values`` then reads a later body of the same
# shape with numpy: it finds the lines, masks out the value texts, and accepts the body only when
# the remaining bytes (comments, HELP/TYPE lines, blank lines and each sample's head, newlines of
# non-sample lines) have the same SHA-256 digest (a changed label, added, removed or
# reordered series, or changed comment gives another digest) and every value text has the plain
# form ``value [timestamp]``. Anything else returns None and the body takes ``scan_exposition``.

import hashlib  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402


class Template(NamedTuple):
    lines: int  # newline-terminated lines (a missing final newline counts as present)
    sample_lines: np.ndarray  # int32: line number (0-based) of each sample, in order
    head_len: np.ndarray  # int32: bytes of that line before its value
    digest: bytes  # SHA-256 of the body without the samples' value texts and their newlines

    @property
    def nbytes(self) -> int:
        return self.sample_lines.nbytes + self.head_len.nbytes + len(self.digest) + 120


# The value text of a sample line as the reference parser's fast forms read it (value, optional
# integer ms timestamp, trailing blanks or \r): nothing else is taken by the template path.
_RESTS = re.compile(rb"(?:[-+.0-9a-zA-Z]+(?:[ \t]+-?[0-9]+)?[ \t\r]*\n)*").fullmatch
_REST_PAIRS = re.compile(rb"([-+.0-9a-zA-Z]+)(?:[ \t]+(-?[0-9]+))?[ \t\r]*\n").findall


def _lines_and_values(raw: bytes, lines: int, sample_lines: np.ndarray, head_len: np.ndarray):
    """(bytes that are not value texts, value texts each ended by '\\n'), or None when the body's
    lines do not fit the shape."""
    if not raw.endswith(b"\n"):
        raw += b"\n"
    arr = np.frombuffer(raw, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    if len(nl) != lines:
        return None
    ends = nl[sample_lines]
    starts = np.zeros(len(sample_lines), dtype=np.int64)
    before = sample_lines > 0
    starts[before] = nl[sample_lines[before] - 1] + 1
    value_at = starts + head_len
    if len(value_at) and (value_at >= ends).any():  # a line shorter than its head: no value
        return None
    # Alternating runs: not a value, value text with its newline, not a value, ...
    bounds = np.empty(2 * len(value_at) + 2, dtype=np.int64)
    bounds[0], bounds[-1] = 0, len(arr)
    bounds[1:-1:2], bounds[2:-1:2] = value_at, ends + 1
    in_value = np.repeat((np.arange(len(bounds) - 1) & 1).astype(np.bool_), np.diff(bounds))
    return arr[~in_value], arr[in_value].tobytes()


def _digest(kept: np.ndarray) -> bytes:
    return hashlib.sha256(kept).digest()


# A sample line in the form the reference parser's fast path reads (name, optional ``{labels}``
# without braces inside, blanks, value, optional integer timestamp): its head ends at the value.
# In this form the reference reads the value and timestamp from the text after the head, whichever
# of its paths it takes (no exemplar, no quoted name, no brace in a label value).
_PLAIN_HEAD_RE = re.compile(
    rf"^{_NAME}(?:\{{[^{{}}\n]*\}})?[ \t]+(?=[-+.0-9a-zA-Z]+(?:[ \t]+-?[0-9]+)?[ \t\r]*$)", re.M
)
_PLAIN_HEAD = _PLAIN_HEAD_RE.finditer


def first_head(text: str) -> str | None:
    """The head of the body's first plain sample line: with the default host, what tells apart
    the pages one sender posts (each exporter's, or each node's when it has no default host)."""
    m = _PLAIN_HEAD_RE.search(text)
    return None if m is None else m.group()


def template_of(text: str, samples: int) -> Template | None:
    """The shape of a body ``scan_exposition`` accepted with ``samples`` samples; None when a
    sample line is not in the plain form (such a body keeps the full scan)."""
    raw = text.encode("utf-8")
    if not raw.endswith(b"\n"):
        raw += b"\n"
    nl = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    if text.isascii():  # character offsets are byte offsets
        found = [(m.start(), m.end()) for m in _PLAIN_HEAD(text)]
        if len(found) != samples:  # a sample line (not blank, not '#') not in the plain form
            return None
        at = np.array(found, dtype=np.int64).reshape(-1, 2)
        sample_lines = np.searchsorted(nl, at[:, 0]).astype(np.int32)
        head_len = (at[:, 1] - at[:, 0]).astype(np.int32)
    else:
        lines, head = [], []
        for k, line in enumerate(text.split("\n")):
            stripped = line.strip(" \t\r")
            if not stripped or stripped[0] == "#":
                continue
            m = next(_PLAIN_HEAD(line), None)
            if m is None:
                return None
            lines.append(k)
            head.append(len(line[: m.end()].encode("utf-8")))
        if len(lines) != samples:
            return None
        sample_lines, head_len = np.array(lines, dtype=np.int32), np.array(head, dtype=np.int32)
    shape = (len(nl), sample_lines, head_len)
    found_values = _lines_and_values(raw, *shape)
    if found_values is None:
        return None
    return Template(*shape, _digest(found_values[0]))


try:  # the compiled template read (template_values); optional at install, like _rwscan
    from telemetry.ingestion import _textscan
except ImportError:  # pragma: no cover - an install without a C compiler
    _textscan = None
if os.environ.get("PRECURSOR_COMPILED_SCANNER", "1") == "0":
    _textscan = None
COMPILED_TEMPLATE_READ = _textscan is not None


def template_values(template: Template, text: str, *, default_ts_ms: int
                    ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(value per sample, timestamp per sample or None when none carries its own) for a body of
    ``template``'s shape, equal to what ``scan_exposition`` reads from it; None when the body
    differs in anything but its values (or a value is not in the plain form).

    Compiled where ``_textscan`` was built (``template_values_compiled``: one pass in C without
    the interpreter lock, the digest by hashlib, which lets go of it too: a scrape's read no longer
    holds up the other relays' requests); else ``template_values_numpy``, with the same answers
    (the tests compare the two)."""
    if _textscan is not None:
        return template_values_compiled(template, text, default_ts_ms=default_ts_ms)
    return template_values_numpy(template, text, default_ts_ms=default_ts_ms)


def template_values_compiled(template: Template, text: str, *, default_ts_ms: int
                             ) -> tuple[np.ndarray, np.ndarray | None] | None:
    raw = text.encode("utf-8") if text.endswith("\n") else (text + "\n").encode("utf-8")
    n = len(template.sample_lines)
    kept = bytearray(len(raw) + 1)
    values = np.empty(n, dtype=np.float64)
    stamps = np.empty(n, dtype=np.int64)
    got = _textscan.split(raw, template.lines, template.sample_lines, template.head_len, kept, values, stamps,
                          int(default_ts_ms))
    if got is None:
        return None
    size, any_ts = got
    if hashlib.sha256(memoryview(kept)[:size]).digest() != template.digest:
        return None
    return values, (stamps if any_ts else None)


def template_values_numpy(template: Template, text: str, *, default_ts_ms: int
                          ) -> tuple[np.ndarray, np.ndarray | None] | None:
    found = _lines_and_values(text.encode("utf-8"), template.lines, template.sample_lines, template.head_len)
    if found is None or _digest(found[0]) != template.digest:
        return None
    rests = found[1]
    if not _RESTS(rests):
        return None
    n = len(template.sample_lines)
    tokens = rests.split()
    try:
        if len(tokens) == n:  # one token a line: values only
            return np.array(list(map(float, tokens)), dtype=np.float64), None
        pairs = _REST_PAIRS(rests)
        values = np.array([float(v) for v, _ in pairs], dtype=np.float64)
    except ValueError:
        return None  # not a number: scan_exposition's fallback explains it
    if len(values) != n:
        return None
    stamps = [int(s) if s else default_ts_ms for _, s in pairs]
    if min(stamps) < _INT64_MIN or max(stamps) > _INT64_MAX:
        return None
    return values, np.array(stamps, dtype=np.int64)

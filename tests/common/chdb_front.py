#!/usr/bin/env python3
"""A ClickHouse HTTP interface over chdb, for the tests.

PyPI's `chdb` is the ClickHouse engine in one process, with no server. This
front serves, over one `chdb.session.Session(DIR)`, what MoonCDC's ClickHouse
target and its tests use of ClickHouse's HTTP interface, so that the ClickHouse
test suite (tests/clickhouse.rs, through tests/common/ch.rs with
MOONCDC_CLICKHOUSE_ENGINE=chdb) runs against a current engine:

- `GET`/`POST /ping` (and `GET /` without a query) answer `Ok.\\n`.
- `/`: the query is the URL's `query` parameter, a newline, then the request
  body (ClickHouse's rule). Bodies of any size, with a Content-Length or
  `Transfer-Encoding: chunked`.
- `INSERT ... FORMAT F` followed by data (the statement's line, then the
  data; or the statement in `query=` and the data as the body): the data is
  streamed to a temporary file, then run as `INSERT ... FROM INFILE '<file>'
  FORMAT F` (any input format chdb reads; `FORMAT Values` is run as SQL).
- Output: the query's own `FORMAT` clause wins, else `default_format`, else
  TabSeparated (ClickHouse HTTP's default). The whole result is computed,
  then sent with a Content-Length: an error is always an error status, never
  text appended to a 200 reply (as with `wait_end_of_query=1`).
- URL parameters: `database` (the current database of that query, also
  taken from an `X-ClickHouse-Database` header; run as `USE`, so an unknown
  one is ClickHouse's UNKNOWN_DATABASE error); `default_format` (or an
  `X-ClickHouse-Format` header);
  `query_id`, `wait_end_of_query`, `buffer_size`, `quota_key`, `stacktrace`,
  `role`, `client_protocol_version`, `user`, `password` are accepted (the
  last two as credentials) and otherwise ignored; `param_NAME` are query
  parameters (`{NAME:Type}`); every other parameter is a setting for that
  query only: `SET name = 'value'` before it and `SET name = DEFAULT` after
  it, whatever the outcome (an unknown setting is the engine's
  UNKNOWN_SETTING error).
- Credentials: `X-ClickHouse-User`/`X-ClickHouse-Key` headers, HTTP Basic
  auth, or the `user`/`password` parameters (first found, in that order); none
  is user `default` with an empty password. Checked against the `--user
  NAME:PASSWORD` options; a mismatch is HTTP 403 with ClickHouse's text
  (`Code: 516. ... (AUTHENTICATION_FAILED)`). Every user is an administrator.
- Errors: the engine's own text (`Code: N. DB::Exception: ... (NAME)`, with
  ` (version X)` added as a server adds it), header
  `X-ClickHouse-Exception-Code: N`, and the status ClickHouse gives that error
  (400 for syntax and parse errors, 403 authentication, 404 unknown
  table/database/setting/..., 408 timeout, 500 otherwise).
- Concurrency: a ThreadingHTTPServer with HTTP/1.1 keep-alive; one lock
  around the session, so statements run one at a time (two inserts sent at
  once are serialized; their bodies are still received in parallel).
- `python3 chdb_front.py --dir DIR --port-file FILE [--pid-file FILE]
  [--user NAME:PASSWORD ...]`: binds 127.0.0.1 port 0 (or `--port`), writes
  the port to FILE once listening (and its pid to the pid file), data in DIR,
  kept across restarts. SIGTERM or SIGINT stops it cleanly (the running
  statement finishes, the session is closed).

NOT covered (by design; a test that needs one of these must run on a real
server): the native protocol (no TCP port), HTTPS, the MySQL/PostgreSQL/gRPC
interfaces; clusters, replication, ZooKeeper/Keeper and `ON CLUSTER`; query
cancellation (a closed connection does not stop its statement) and
`max_execution_time` beyond what the engine itself enforces; HTTP sessions
(`session_id` is refused, so each request starts from the defaults);
compression of requests or replies (`Content-Encoding`, `compress`,
`decompress` are refused; replies are never compressed); progress and
summary headers (`X-ClickHouse-Progress`, `X-ClickHouse-Summary`); streaming
of large results (held in memory, then sent); read-only GET requests (a GET
may change data here) and the `readonly` setting (refused: it cannot be
undone within the shared session); users, roles, grants, quotas and profiles
beyond the name and password check; multipart/form-data external tables;
`SET` statements sent as queries change the shared session for every later
request; system.query_log and the server's own logs; the HTTP handlers
configuration (/play, /dashboard, /replicas_status, custom handlers).
"""

import argparse
import base64
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import chdb
from chdb import session as chdb_session

# HTTP interface parameters that are not settings (ClickHouse's HTTPHandler
# names these; `database`, `query`, `default_format`, `user`, `password` are
# used here).
INTERFACE_PARAMS = {
    "query",
    "database",
    "default_format",
    "user",
    "password",
    "quota_key",
    "query_id",
    "stacktrace",
    "role",
    "buffer_size",
    "wait_end_of_query",
    "client_protocol_version",
}
# Parameters that ask for something the front does not do.
REFUSED_PARAMS = {
    "session_id": "HTTP sessions",
    "session_timeout": "HTTP sessions",
    "session_check": "HTTP sessions",
    "close_session": "HTTP sessions",
    "compress": "compressed replies",
    "decompress": "compressed requests",
    "readonly": "the readonly setting (it cannot be undone in the shared session)",
}

# The status ClickHouse's HTTP interface gives an error, by the error's name
# (chdb's messages end with it in parentheses).
STATUS_BY_NAME = {}
for _name in ("REQUIRED_PASSWORD",):
    STATUS_BY_NAME[_name] = 401
for _name in (
    "UNKNOWN_USER",
    "WRONG_PASSWORD",
    "AUTHENTICATION_FAILED",
    "SET_NON_GRANTED_ROLE",
    "ACCESS_DENIED",
):
    STATUS_BY_NAME[_name] = 403
for _name in (
    "BAD_ARGUMENTS",
    "CANNOT_COMPILE_REGEXP",
    "CANNOT_PARSE_TEXT",
    "CANNOT_PARSE_ESCAPE_SEQUENCE",
    "CANNOT_PARSE_QUOTED_STRING",
    "CANNOT_PARSE_DATE",
    "CANNOT_PARSE_DATETIME",
    "CANNOT_PARSE_NUMBER",
    "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
    "CANNOT_PARSE_IPV4",
    "CANNOT_PARSE_IPV6",
    "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    "CANNOT_PARSE_UUID",
    "DUPLICATE_COLUMN",
    "ILLEGAL_COLUMN",
    "UNKNOWN_ELEMENT_IN_AST",
    "UNKNOWN_TYPE_OF_AST_NODE",
    "THERE_IS_NO_COLUMN",
    "TOO_DEEP_AST",
    "TOO_BIG_AST",
    "UNEXPECTED_AST_STRUCTURE",
    "SYNTAX_ERROR",
    "INCORRECT_DATA",
    "TYPE_MISMATCH",
    "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
):
    STATUS_BY_NAME[_name] = 400
for _name in (
    "UNKNOWN_TABLE",
    "UNKNOWN_FUNCTION",
    "UNKNOWN_IDENTIFIER",
    "UNKNOWN_TYPE",
    "UNKNOWN_STORAGE",
    "UNKNOWN_DATABASE",
    "UNKNOWN_SETTING",
    "UNKNOWN_DIRECTION_OF_SORTING",
    "UNKNOWN_AGGREGATE_FUNCTION",
    "UNKNOWN_FORMAT",
    "UNKNOWN_DATABASE_ENGINE",
    "UNKNOWN_TYPE_OF_QUERY",
    "UNKNOWN_ROLE",
):
    STATUS_BY_NAME[_name] = 404
STATUS_BY_NAME["QUERY_IS_TOO_LARGE"] = 413
STATUS_BY_NAME["NOT_IMPLEMENTED"] = 501
STATUS_BY_NAME["SOCKET_TIMEOUT"] = 503
STATUS_BY_NAME["CANNOT_OPEN_FILE"] = 503
STATUS_BY_NAME["CANNOT_SCHEDULE_TASK"] = 503
STATUS_BY_NAME["HTTP_LENGTH_REQUIRED"] = 411
STATUS_BY_NAME["TIMEOUT_EXCEEDED"] = 408
STATUS_BY_NAME["UNSUPPORTED_MEDIA_TYPE"] = 415

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}

PIECE = 1 << 20


class ChError(Exception):
    """An error in ClickHouse's words: its code, its name and its text."""

    def __init__(self, code, name, text):
        super().__init__(text)
        self.code = code
        self.name = name
        self.text = text


def engine_error(e, version):
    """A ChError from the engine's exception text."""
    text = str(e).strip()
    prefix = "Streaming query failed: "
    if text.startswith(prefix):
        text = text[len(prefix):]
    code, name = 1001, "STD_EXCEPTION"
    if text.startswith("Code: "):
        digits = text[6:].split(".", 1)[0]
        if digits.isdigit():
            code = int(digits)
    else:
        text = "Code: 1001. DB::Exception: %s (STD_EXCEPTION)" % text
    end = text.rstrip()
    if end.endswith(")"):
        start = end.rfind("(")
        cand = end[start + 1:-1]
        if cand and cand.replace("_", "").isalnum() and cand.upper() == cand:
            name = cand
    if not end.endswith(")") or "(version " not in end[end.rfind("("):]:
        text = "%s (version %s)" % (end, version)
    return ChError(code, name, text)


def front_error(code, name, what, version):
    return ChError(code, name, "Code: %d. DB::Exception: %s. (%s) (version %s)" % (code, what, name, version))


# ------------------------------------------------------------ the SQL scanner


def _skip_space_and_comments(b, i, n):
    """The index of the first byte at or after i that is neither whitespace
    nor in a comment; None when the text ends inside a comment."""
    while i < n:
        c = b[i]
        if c in b" \t\r\n\f\v":
            i += 1
        elif b.startswith(b"--", i) or c == 0x23 and b.startswith(b"# ", i):
            j = b.find(b"\n", i)
            if j < 0:
                return None
            i = j + 1
        elif b.startswith(b"/*", i):
            j = b.find(b"*/", i + 2)
            if j < 0:
                return None
            i = j + 2
        else:
            return i
    return i


def _end_of_quoted(b, i, n):
    """The index after the quoted token that starts at i (', ` or "); None
    when it does not end within b."""
    q = b[i]
    i += 1
    while i < n:
        c = b[i]
        if c == 0x5C:  # backslash escapes the next byte
            i += 2
        elif c == q:
            if i + 1 < n and b[i + 1] == q:  # doubled quote
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return None


def _is_word(c):
    return c == 0x5F or 0x30 <= c <= 0x39 or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A or c >= 0x80


def scan_insert(b, complete):
    """Find where an INSERT's data starts in `b`, the beginning of a query.

    Returns ("sql", None) when the query is not an INSERT whose data follows
    a FORMAT clause (read it whole and run it as it is), ("more", None) when
    more bytes are needed to tell, or ("insert", (head_end, settings_at,
    format_name, data_start)): the statement is b[:head_end] (up to the
    FORMAT keyword), its top-level SETTINGS keyword at settings_at (or None),
    the format's name, and the data from data_start on. `complete`: b is the
    whole query."""
    n = len(b)
    i = _skip_space_and_comments(b, 0, n)
    if i is None:
        return ("sql" if complete else "more", None)
    j = i
    while j < n and _is_word(b[j]):
        j += 1
    if j == n and not complete:
        return ("more", None)
    if b[i:j].upper() != b"INSERT":
        return ("sql", None)
    depth = 0
    settings_at = None
    i = j
    while True:
        i = _skip_space_and_comments(b, i, n)
        if i is None or i >= n:
            return ("sql" if complete else "more", None)
        c = b[i]
        if c in b"'`\"":
            e = _end_of_quoted(b, i, n)
            if e is None:
                return ("sql" if complete else "more", None)
            i = e
        elif c in b"([":
            depth += 1
            i += 1
        elif c in b")]":
            depth -= 1
            i += 1
        elif _is_word(c):
            j = i
            while j < n and _is_word(b[j]):
                j += 1
            if j == n and not complete:
                return ("more", None)
            word = b[i:j].upper()
            if depth == 0 and word in (b"VALUES", b"SELECT", b"WITH", b"FROM", b"INFILE"):
                return ("sql", None)
            if depth == 0 and word == b"SETTINGS":
                settings_at = i
            if depth == 0 and word == b"FORMAT":
                k = _skip_space_and_comments(b, j, n)
                if k is None or k >= n:
                    return ("sql" if complete else "more", None)
                m = k
                while m < n and _is_word(b[m]):
                    m += 1
                if m == n and not complete:
                    return ("more", None)
                name = b[k:m].decode("ascii", "replace")
                if not name or name.lower() == "values":
                    return ("sql", None)
                # Data starts after the first newline, if there is one, or
                # after the spaces otherwise (ClickHouse's rule).
                d = m
                while d < n and b[d] in b" \t\f":
                    d += 1
                if d < n and b[d] == 0x0D:
                    d += 1
                if d == n and not complete:
                    return ("more", None)
                if d < n and b[d] == 0x0A:
                    d += 1
                return ("insert", (i, settings_at, name, d))
            i = j
        else:
            i += 1


def sql_literal(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ------------------------------------------------------------ request bodies


class Body:
    """A request body, read in pieces: by Content-Length or chunked."""

    def __init__(self, rfile, headers):
        self.rfile = rfile
        te = (headers.get("Transfer-Encoding") or "").lower()
        self.chunked = "chunked" in te
        cl = headers.get("Content-Length")
        self.left = int(cl) if (cl and not self.chunked) else 0
        self.chunk_left = 0
        self.done = not self.chunked and self.left == 0
        self.broken = False

    def read(self, size=PIECE):
        """Up to `size` bytes; b"" at the end."""
        if self.done:
            return b""
        try:
            if not self.chunked:
                data = self.rfile.read(min(size, self.left))
                if not data:
                    self.broken = True
                    self.done = True
                    raise ConnectionError("the request body ended early")
                self.left -= len(data)
                if self.left == 0:
                    self.done = True
                return data
            if self.chunk_left == 0:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("the request body ended early")
                size_text = line.split(b";", 1)[0].strip()
                self.chunk_left = int(size_text, 16)
                if self.chunk_left == 0:
                    # Trailers, up to the empty line.
                    while True:
                        t = self.rfile.readline(65537)
                        if not t or t in (b"\r\n", b"\n"):
                            break
                    self.done = True
                    return b""
            data = self.rfile.read(min(size, self.chunk_left))
            if not data:
                raise ConnectionError("the request body ended early")
            self.chunk_left -= len(data)
            if self.chunk_left == 0:
                self.rfile.readline(3)  # the CRLF after the chunk
            return data
        except (ConnectionError, ValueError, OSError):
            self.broken = True
            self.done = True
            raise

    def drain(self):
        try:
            while self.read():
                pass
        except (ConnectionError, ValueError, OSError):
            pass


# ------------------------------------------------------------ the server


class Front:
    def __init__(self, data_dir, users):
        self.dir = os.path.abspath(data_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.tmp = os.path.join(self.dir, "front_tmp")
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp, exist_ok=True)
        self.users = users
        self.lock = threading.Lock()
        self.session = chdb_session.Session(self.dir)
        self.version = self.session.query("SELECT version()", "TabSeparated").bytes().decode().strip()

    def close(self):
        if self.lock.acquire(timeout=60):
            try:
                if self.session is not None:
                    self.session.close()
                    self.session = None
            finally:
                self.lock.release()

    def _run(self, sql, fmt, params=None):
        try:
            return self.session.query(sql, fmt, params=params or {}).bytes()
        except Exception as e:
            err = engine_error(e, self.version)
        # chdb hands the output a failed statement had written so far to the
        # next statement, as the start of its result: run harmless ones until
        # one answers exactly, so the next request starts clean.
        for _ in range(5):
            try:
                if self.session.query("SELECT 1", "TabSeparated").bytes() == b"1\n":
                    break
            except Exception:
                pass
        raise err

    def execute(self, sql, database, settings, fmt, params):
        """Run one statement (bytes) with its database and settings; its
        result's bytes (or a ChError), the seconds spent waiting for the
        session, and those spent running."""
        t0 = time.time()
        with self.lock:
            t1 = time.time()
            try:
                return self._execute(sql, database, settings, fmt, params), t1 - t0, time.time() - t1
            except ChError as e:
                e.text_timing = " (waited %.3fs, ran %.3fs)" % (t1 - t0, time.time() - t1)
                raise

    def _execute(self, sql, database, settings, fmt, params):
        if self.session is None:
            raise front_error(210, "NETWORK_ERROR", "the chdb front is stopping", self.version)
        self._run("USE `%s`" % database.replace("\\", "\\\\").replace("`", "\\`"), "TabSeparated")
        applied = []
        try:
            for name, value in settings:
                self._run("SET `%s` = %s" % (name.replace("`", ""), sql_literal(value)), "TabSeparated")
                applied.append(name)
            return self._run(sql, fmt, params)
        finally:
            for name in applied:
                try:
                    self._run("SET `%s` = DEFAULT" % name.replace("`", ""), "TabSeparated")
                except ChError:
                    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "chdb-front"
    sys_version = ""

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        pass

    def log(self, text):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), text))
        sys.stderr.flush()

    # -- replies

    def reply(self, status, body, headers=()):
        self.send_response(status, REASONS.get(status))
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        else:
            self.send_header("Keep-Alive", "timeout=10")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def reply_error(self, err, query_id):
        status = STATUS_BY_NAME.get(err.name, 500)
        self.log("%d%s %s" % (status, getattr(err, "text_timing", ""), err.text[:300]))
        self.reply(
            status,
            (err.text.rstrip("\n") + "\n").encode("utf-8", "replace"),
            [
                ("Content-Type", "text/plain; charset=UTF-8"),
                ("X-ClickHouse-Exception-Code", str(err.code)),
                ("X-ClickHouse-Query-Id", query_id),
                ("X-ClickHouse-Server-Display-Name", "chdb-front"),
            ],
        )

    # -- methods

    def do_GET(self):
        self.handle_request()

    def do_POST(self):
        self.handle_request()

    def do_HEAD(self):
        self.handle_request()

    def handle_request(self):
        front = self.server.front
        url = urllib.parse.urlsplit(self.path)
        params = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        body = Body(self.rfile, self.headers)
        query_id = str(uuid.uuid4())
        for k, v in params:
            if k == "query_id" and v:
                query_id = v
        try:
            self.serve(front, url, params, body, query_id)
        except ChError as err:
            body.drain()
            if body.broken:
                self.close_connection = True
            self.reply_error(err, query_id)
        except (ConnectionError, BrokenPipeError) as e:
            self.log("connection lost: %s" % e)
            self.close_connection = True
        except Exception as e:  # a bug of the front: say so, in ClickHouse's form
            traceback.print_exc()
            body.drain()
            self.close_connection = True
            try:
                self.reply_error(front_error(1001, "STD_EXCEPTION", "chdb front: %r" % e, front.version), query_id)
            except OSError:
                pass
        finally:
            if body.broken:
                self.close_connection = True

    def serve(self, front, url, params, body, query_id):
        path = url.path
        has_query = any(k == "query" for k, _ in params)
        if path == "/ping" or (path == "/" and self.command in ("GET", "HEAD") and not has_query):
            body.drain()
            self.reply(200, b"Ok.\n", [("Content-Type", "text/html; charset=UTF-8")])
            return
        if path != "/":
            body.drain()
            self.reply(
                404,
                ("There is no handle %s\n\nUse / or /ping for health checks.\n" % path).encode(),
                [("Content-Type", "text/plain; charset=UTF-8")],
            )
            return
        version = front.version
        # Credentials: headers, then Basic auth, then URL parameters.
        user = password = None
        if self.headers.get("X-ClickHouse-User") is not None or self.headers.get("X-ClickHouse-Key") is not None:
            user = self.headers.get("X-ClickHouse-User") or "default"
            password = self.headers.get("X-ClickHouse-Key") or ""
        elif (self.headers.get("Authorization") or "").lower().startswith("basic "):
            try:
                raw = base64.b64decode(self.headers["Authorization"][6:].strip()).decode("utf-8")
            except Exception:
                raise front_error(194, "REQUIRED_PASSWORD", "Invalid Basic authorization", version)
            user, _, password = raw.partition(":")
        else:
            d = dict(params)
            user = d.get("user") or "default"
            password = d.get("password", "")
        if front.users.get(user) != password:
            raise front_error(
                516,
                "AUTHENTICATION_FAILED",
                "%s: Authentication failed: password is incorrect, or there is no user with such name" % user,
                version,
            )
        enc = (self.headers.get("Content-Encoding") or "identity").lower()
        if enc != "identity":
            raise front_error(48, "NOT_IMPLEMENTED", "the chdb front does not read compressed requests (Content-Encoding: %s)" % enc, version)
        if (self.headers.get("Content-Type") or "").lower().startswith("multipart/form-data"):
            raise front_error(48, "NOT_IMPLEMENTED", "the chdb front does not take external tables (multipart/form-data)", version)
        database = self.headers.get("X-ClickHouse-Database") or "default"
        fmt = self.headers.get("X-ClickHouse-Format") or "TabSeparated"
        settings = []
        qparams = {}
        query_param = None
        for k, v in params:
            if k == "query":
                query_param = v
            elif k == "database":
                if v:
                    database = v
            elif k == "default_format":
                if v:
                    fmt = v
            elif k.startswith("param_"):
                qparams[k[6:]] = v
            elif k in REFUSED_PARAMS:
                if k == "readonly" and v in ("", "0"):
                    continue
                if k in ("compress", "decompress") and v in ("", "0"):
                    continue
                raise front_error(48, "NOT_IMPLEMENTED", "the chdb front does not do %s (parameter %s)" % (REFUSED_PARAMS[k], k), version)
            elif k in INTERFACE_PARAMS or k == "":
                continue
            else:
                settings.append((k, v))
        # The query: the `query` parameter, a newline, then the body.
        buf = bytearray(query_param.encode("utf-8") + b"\n") if query_param else bytearray()
        decision = None
        while True:
            kind, found = scan_insert(bytes(buf), body.done)
            if kind != "more" or body.done:
                decision = (kind, found)
                break
            piece = body.read()
            buf += piece
        kind, found = decision
        if kind == "insert":
            head_end, settings_at, name, data_start = found
            fd, path_tmp = tempfile.mkstemp(dir=front.tmp, suffix=".data")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(buf[data_start:])
                    del buf[data_start:]
                    while True:
                        piece = body.read()
                        if not piece:
                            break
                        f.write(piece)
                head = bytes(buf[:head_end])
                infile = b" FROM INFILE " + sql_literal(path_tmp).encode("utf-8") + b" "
                if settings_at is not None:
                    stmt = head[:settings_at] + infile + head[settings_at:]
                else:
                    stmt = head.rstrip() + infile
                stmt += b" FORMAT " + name.encode("ascii")
                result, waited, ran = front.execute(stmt, database, settings, fmt, qparams)
                self.log(
                    "200 (waited %.3fs, ran %.3fs) %r, %d bytes of data"
                    % (waited, ran, head[:200].decode("utf-8", "replace"), os.path.getsize(path_tmp))
                )
            finally:
                try:
                    os.unlink(path_tmp)
                except OSError:
                    pass
        else:
            while True:
                piece = body.read()
                if not piece:
                    break
                buf += piece
            sql = bytes(buf)
            if not sql.strip():
                raise front_error(62, "SYNTAX_ERROR", "Empty query", version)
            result, waited, ran = front.execute(sql, database, settings, fmt, qparams)
            self.log("200 (waited %.3fs, ran %.3fs) %r" % (waited, ran, sql[:200].decode("utf-8", "replace")))
        self.reply(
            200,
            result,
            [
                ("Content-Type", "text/plain; charset=UTF-8"),
                ("X-ClickHouse-Query-Id", query_id),
                ("X-ClickHouse-Server-Display-Name", "chdb-front"),
            ],
        )


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def parse_user(text):
    name, sep, password = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError("--user takes NAME:PASSWORD (the password may be empty)")
    return name, password


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description="A ClickHouse HTTP interface over chdb, for the tests.")
    ap.add_argument("--dir", required=True, help="the data folder (kept across restarts)")
    ap.add_argument("--port-file", required=True, help="where the port is written once listening")
    ap.add_argument("--pid-file", help="where the process id is written")
    ap.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--user", action="append", type=parse_user, default=[], help="NAME:PASSWORD, repeatable")
    args = ap.parse_args()
    users = dict(args.user) if args.user else {"default": ""}

    front = Front(args.dir, users)
    server = Server(("127.0.0.1", args.port), Handler)
    server.front = front
    if args.pid_file:
        write_atomically(args.pid_file, "%d\n" % os.getpid())
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    serving.start()
    write_atomically(args.port_file, "%d\n" % server.server_address[1])
    sys.stderr.write(
        "chdb front: chdb %s (ClickHouse %s) on 127.0.0.1:%d, data in %s\n"
        % (getattr(chdb, "__version__", "?"), front.version, server.server_address[1], front.dir)
    )
    sys.stderr.flush()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    front.close()
    sys.stderr.write("chdb front: stopped\n")
    sys.stderr.flush()


if __name__ == "__main__":
    main()

"""A script of SQL statements -> the statements Freshet runs itself, and the Spark SQL it hands to Spark.

Freshet's own statements are the few ksqlDB users know::

    CREATE [OR REPLACE] STREAM|TABLE [IF NOT EXISTS] name (col TYPE [PRIMARY KEY], col AS expr, ...)
        WITH (topic='...', format='json|csv|raw|avro|debezium', key='col', timestamp='col', watermark='30 seconds')
    CREATE STREAM|TABLE name [WITH (...)] AS SELECT ...        (a persistent query: freshet.sql.queries)
    SELECT ... EMIT CHANGES|FINAL [UNTIL n ROWS | UNTIL 'duration'] [LIMIT n]
    SHOW STREAMS|TABLES|QUERIES|TOPICS    DESCRIBE name    EXPLAIN select    TERMINATE id|ALL
    DROP STREAM|TABLE [IF EXISTS] name [DELETE TOPIC]    SET 'auto.offset.reset' = 'earliest|latest'

Everything else is Spark SQL, passed to Spark as written (Spark's parser then judges it). The script is cut into
statements and the statements recognised with sqlglot's tokenizer (Spark dialect: quotes, backticks, comments,
escapes as Spark reads them); no grammar of Spark SQL is written here. Every statement keeps where it starts in
the script, so an error, Freshet's or Spark's, names the script's line and column.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from .errors import SqlError


def position(script: str, offset: int) -> tuple[int, int]:
    """(line, column), both from 1, of ``offset`` in ``script``."""
    line = script.count("\n", 0, offset) + 1
    return line, offset - (script.rfind("\n", 0, offset) + 1) + 1


@dataclass
class Statement:
    """One statement: ``text`` as written (without its ``;``), starting at ``start`` in ``script``."""

    text: str
    script: str = field(repr=False)
    start: int

    @property
    def line(self) -> int:
        return position(self.script, self.start)[0]

    @property
    def column(self) -> int:
        return position(self.script, self.start)[1]

    def error(self, message: str, offset: int | None = None) -> SqlError:
        """A SqlError pointing at ``offset`` of the script (default: the statement's start)."""
        return SqlError(message, *position(self.script, self.start if offset is None else offset))


@dataclass
class Column:
    name: str
    type: str | None  # Spark DDL type as written; None for a computed column
    expr: str | None = None  # ``name AS expr``: computed from the other columns
    key: bool = False  # declared PRIMARY KEY (or KEY)
    start: int = 0  # where the column's definition starts in the script


@dataclass(kw_only=True)
class _Create(Statement):
    kind: str  # "stream" | "table"
    name: str
    options: dict[str, str]  # WITH (...)
    or_replace: bool = False
    if_not_exists: bool = False


@dataclass(kw_only=True)
class CreateSource(_Create):
    """CREATE STREAM|TABLE name (columns) WITH (...): a stream or table over a topic."""

    columns: list[Column]


@dataclass(kw_only=True)
class CreateAsSelect(_Create):
    """CREATE STREAM|TABLE name AS SELECT ...: a persistent query."""

    select: str
    select_start: int  # where ``select`` starts in the script


@dataclass
class PushQuery(Statement):
    select: str
    limit: int | None = None
    until_rows: int | None = None
    until_seconds: float | None = None
    final: bool = False  # EMIT FINAL: each result once, when the watermark closes it (append mode)


@dataclass
class Show(Statement):
    what: str  # streams | tables | queries | topics
    extended: bool = False


@dataclass
class Describe(Statement):
    name: str
    extended: bool = False


@dataclass
class Explain(Statement):
    select: str
    select_start: int
    mode: str = ""  # Spark's EXPLAIN modes: EXTENDED, CODEGEN, COST, FORMATTED


@dataclass
class Drop(Statement):
    kind: str
    name: str
    delete_topic: bool = False
    if_exists: bool = False


@dataclass
class Terminate(Statement):
    query_id: str  # or "ALL"


@dataclass
class SetOption(Statement):
    key: str
    value: str


@dataclass
class SparkSql(Statement):
    """Spark SQL as written: Spark parses and runs it."""


# The words a Spark SQL statement starts with: the first word of every alternative of SqlBaseParser.g4's
# statement, query (SELECT, FROM, VALUES, TABLE, MAP, REDUCE, WITH, or a parenthesis), DML, cursors, the Hive
# commands it names to refuse, and SQL scripting's compound statements (a label too: ``name:``). A word outside this set
# (SELEC, CRATE) is a syntax error without a grammar (tests/sql/test_session.py checks the set against Spark's
# parser, keyword by keyword).
SPARK_STARTS = frozenset("""
    SELECT WITH FROM VALUES TABLE MAP REDUCE INSERT DELETE UPDATE MERGE USE SET RESET CREATE REPLACE ALTER DROP SHOW
    ANALYZE DECLARE EXPLAIN DESC DESCRIBE COMMENT REFRESH CACHE UNCACHE CLEAR LOAD TRUNCATE MSCK REPAIR ADD LIST
    GRANT REVOKE EXPORT IMPORT LOCK UNLOCK START COMMIT ROLLBACK DFS EXECUTE CALL OPEN FETCH CLOSE BEGIN IF WHILE
    REPEAT LOOP FOR CASE LEAVE ITERATE
""".split())
QUERY_STARTS = frozenset(("SELECT", "WITH", "FROM", "VALUES", "TABLE", "MAP", "REDUCE"))
FRESHET_STARTS = frozenset(("TERMINATE",))

# the properties SET takes as Freshet's own (ksqlDB's name); any other SET is Spark's
FRESHET_PROPERTIES = ("auto.offset.reset",)
_WORDS = {TokenType.VAR, TokenType.IDENTIFIER}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|s|minutes?|min|hours?|h|days?|d)\s*",
                       re.IGNORECASE)


def duration_seconds(text: str) -> float | None:
    """'5 minutes', '30 seconds', '1 hour 30 minutes', '500 ms' -> seconds; None when it is not a duration."""
    total, pos = 0.0, 0
    while pos < len(text):
        m = _DURATION.match(text, pos)
        if not m:
            return None
        unit = m.group(2).lower()
        if unit in ("ms",) or unit.startswith("milli"):
            scale = 0.001
        elif unit.startswith("s"):
            scale = 1
        elif unit.startswith("m"):
            scale = 60
        elif unit.startswith("h"):
            scale = 3600
        else:
            scale = 86400
        total += float(m.group(1)) * scale
        pos = m.end()
    return total if pos and total > 0 else None


class _Tokenizer(Spark.Tokenizer):
    # sqlglot reads the rest of a SHOW, EXPLAIN... statement as one opaque string; here every word counts
    COMMANDS: set = set()


def tokenize(script: str) -> list[Token]:
    try:
        return _Tokenizer().tokenize(script)
    except TokenError as e:
        # sqlglot: "Missing ' from LINE:OFFSET" (an unterminated string, identifier or comment)
        found = re.search(r"Missing (\S+) from \d+:(\d+)", str(e.__cause__ or e))
        if found:
            quote = found.group(1)
            offset = min(int(found.group(2)), len(script))
            start = script.rfind(quote, 0, offset + 1) if quote in script else offset
            raise SqlError(f"unterminated {quote} (the quote opened here is never closed)",
                           *position(script, max(start, 0))) from None
        raise SqlError(f"cannot read the script: {e}") from None


def split(script: str) -> list[tuple[list[Token], int, int]]:
    """The statements of ``script``: (tokens, start offset, end offset) each, cut at top-level ``;``."""
    statements, current = [], []
    for token in tokenize(script):
        if token.token_type == TokenType.SEMICOLON:
            if current:
                statements.append(current)
            current = []
        else:
            current.append(token)
    if current:
        statements.append(current)
    return [(tokens, tokens[0].start, tokens[-1].end + 1) for tokens in statements]


def parse(script: str) -> list[Statement]:
    """Every statement of ``script``, in order; SqlError (with line and column) for one of Freshet's statements
    written wrong, and for the syntax errors of Spark SQL that need no grammar of it to be certain (a statement
    no Spark statement starts like, a parenthesis never closed or never opened): they are found before Spark
    starts. The rest of Spark SQL is checked by Spark's parser when it runs."""
    return [_Reader(script, tokens, start, end).statement() for tokens, start, end in split(script)]


def parse_one(text: str) -> Statement:
    statements = parse(text)
    if len(statements) != 1:
        raise SqlError(f"expected one statement, got {len(statements)}")
    return statements[0]


class _Reader:
    """A cursor over one statement's tokens."""

    def __init__(self, script: str, tokens: list[Token], start: int, end: int) -> None:
        self.script, self.tokens, self.start, self.end = script, tokens, start, end
        self.i = 0

    # -- the cursor
    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str:
        """The upper-cased text of a keyword or bare word ahead ('' for a string, a quoted name or the end)."""
        t = self.peek(ahead)
        if t is None or t.token_type in (TokenType.STRING, TokenType.IDENTIFIER, TokenType.NUMBER):
            return ""
        return t.text.upper()

    def accept(self, *words: str) -> bool:
        if all(self.word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            self.fail(f"expected {' '.join(words)}")

    def fail(self, message: str, token: Token | None = None):
        token = token or self.peek()
        offset = token.start if token is not None else self.end
        found = f", found {token.text!r}" if token is not None else ", found the end of the statement"
        raise SqlError(message + found, *position(self.script, offset))

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def name(self, what: str = "a name") -> str:
        t = self.peek()
        if t is None or t.token_type in (TokenType.STRING, TokenType.NUMBER) or not _is_wordlike(t):
            self.fail(f"expected {what}")
        self.i += 1
        return t.text

    def text(self, first: int, last: int) -> str:
        """The script's text from token ``first`` to token ``last`` (inclusive)."""
        return self.script[self.tokens[first].start:self.tokens[last].end + 1]

    def base(self) -> dict:
        return {"text": self.script[self.start:self.end], "script": self.script, "start": self.start}

    def spark(self) -> SparkSql:
        self.check_spark(0, SPARK_STARTS)
        return SparkSql(**self.base())

    def check_spark(self, first: int, starts: frozenset) -> None:
        """The syntax errors of Spark SQL certain without its grammar, in the tokens from ``first`` on: a first
        word no statement (``starts``) begins with, and parentheses or brackets that do not pair up."""
        t = self.tokens[first]
        word = "" if t.token_type in (TokenType.STRING, TokenType.NUMBER) else (t.text.split() or [""])[0].upper()
        label = t.token_type in _WORDS and first + 1 < len(self.tokens) \
            and self.tokens[first + 1].token_type == TokenType.COLON  # a label of a compound statement
        if not (t.token_type == TokenType.L_PAREN or (t.token_type != TokenType.IDENTIFIER and word in starts)
                or label):
            near = difflib.get_close_matches(word, sorted(starts | FRESHET_STARTS), n=1) \
                if word and t.token_type != TokenType.IDENTIFIER else []
            hint = f" (did you mean {near[0]}?)" if near else ""
            what = "query" if starts is QUERY_STARTS else "statement"
            written = self.script[t.start:t.end + 1]
            self.syntax_error(f"syntax error at or near {written!r}: no {what} starts with it{hint}", t)
        opened: list[Token] = []
        pairs = {TokenType.R_PAREN: TokenType.L_PAREN, TokenType.R_BRACKET: TokenType.L_BRACKET}
        for t in self.tokens[first:]:
            if t.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                opened.append(t)
            elif t.token_type in pairs:
                if not opened or opened[-1].token_type != pairs[t.token_type]:
                    self.syntax_error(f"syntax error at or near {t.text!r}: it closes nothing"
                                      + (f" (the {opened[-1].text} before it is still open)" if opened else ""), t)
                opened.pop()
        if opened:
            self.syntax_error(f"the {opened[-1].text} opened here is never closed", opened[-1])

    def syntax_error(self, message: str, token: Token):
        raise SqlError(message, *position(self.script, token.start))

    # -- statements
    def statement(self) -> Statement:
        head = self.word()
        if head == "CREATE":
            return self.create()
        if head in ("SHOW", "LIST") and self.word(1) in ("STREAMS", "TABLES", "QUERIES", "TOPICS"):
            return self.show()
        if head in ("DESCRIBE", "DESC"):
            return self.describe()
        if head == "EXPLAIN":
            return self.explain()
        if head == "DROP" and self.word(1) in ("STREAM", "TABLE"):
            return self.drop()
        if head == "TERMINATE":
            self.i += 1
            query_id = "ALL" if self.accept("ALL") else self.name("a query id (SHOW QUERIES lists them)")
            self.done()
            return Terminate(**self.base(), query_id=query_id)
        if head == "SET" and self.peek(1) is not None and self.peek(1).token_type == TokenType.STRING:
            return self.set_option()
        emit = self.find_emit()
        if emit is not None:
            return self.push_query(emit)
        return self.spark()

    def done(self) -> None:
        if not self.at_end():
            self.fail("unexpected text after the statement")

    def create(self) -> Statement:
        self.expect("CREATE")
        or_replace = self.accept("OR", "REPLACE")
        if self.word() not in ("STREAM", "TABLE"):
            return self.spark()  # CREATE VIEW, FUNCTION, ...: Spark's
        kind = self.word().lower()
        self.i += 1
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.name(f"the {kind}'s name")
        columns: list[Column] = []
        if self.peek() is not None and self.peek().token_type == TokenType.L_PAREN:
            columns = self.columns()
        options: dict[str, str] = {}
        if self.word() == "WITH" and self.peek(1) is not None and self.peek(1).token_type == TokenType.L_PAREN:
            self.i += 1
            options = self.options()
        if self.word() == "AS":
            if columns:
                self.fail(f"CREATE {kind.upper()} ... AS SELECT takes its columns from the query; leave out the list")
            self.i += 1
            if self.at_end():
                self.fail("expected a SELECT after AS")
            first = self.i
            self.check_spark(first, QUERY_STARTS)
            return CreateAsSelect(**self.base(), kind=kind, name=name, select=self.text(first, len(self.tokens) - 1),
                                  select_start=self.tokens[first].start, options=options, or_replace=or_replace,
                                  if_not_exists=if_not_exists)
        if not self.at_end():
            if kind == "table" and not options:
                return self.spark()  # CREATE TABLE ... USING parquet: a Spark table
            self.fail("expected WITH (...) or AS SELECT")
        if not options:
            raise SqlError(f"CREATE {kind.upper()} needs WITH (topic='...', format='...')",
                           *position(self.script, self.start))
        if not columns and options.get("format", "").lower() not in ("avro", "raw"):
            raise SqlError(f"CREATE {kind.upper()} {name} needs its columns: (name TYPE, ...)",
                           *position(self.script, self.start))
        return CreateSource(**self.base(), kind=kind, name=name, columns=columns, options=options,
                            or_replace=or_replace, if_not_exists=if_not_exists)

    def _parenthesised(self) -> list[list[int]]:
        """The token indexes of a ( ... ) list's items, cut at top-level commas; the cursor moves past ')'."""
        opening = self.peek()
        self.i += 1
        items, current, depth = [], [], 0
        while True:
            t = self.peek()
            if t is None:
                self.fail("the ( opened here is never closed", opening)
            self.i += 1
            if t.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif t.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
                if depth == 0:
                    break
                depth -= 1
            elif t.token_type == TokenType.COMMA and depth == 0:
                if not current:
                    self.fail("expected an item before ','", t)
                items.append(current)
                current = []
                continue
            elif t.token_type == TokenType.LT:
                depth += 1
            elif t.token_type == TokenType.GT:
                depth -= 1
            current.append(self.i - 1)
        if current:
            items.append(current)
        elif items:
            self.fail("expected an item after ','", self.tokens[self.i - 1])
        return items

    def columns(self) -> list[Column]:
        columns = []
        for item in self._parenthesised():
            first = self.tokens[item[0]]
            if not _is_wordlike(first) or first.token_type == TokenType.STRING:
                self.fail("expected a column name", first)
            if len(item) == 1:
                self.fail(f"column {first.text} needs a type", first)
            second = self.tokens[item[1]]
            if second.token_type == TokenType.ALIAS or second.text.upper() == "AS":
                if len(item) == 2:
                    self.fail(f"computed column {first.text} needs an expression after AS", second)
                columns.append(Column(first.text, None, self.text(item[2], item[-1]), start=first.start))
                continue
            last, key = item[-1], False
            words = [self.tokens[j].text.upper() for j in item[1:]]
            if words[-1] == "PRIMARY KEY" or (words[-1] == "KEY" and len(words) > 1):
                last, key = item[-2], True
            if last < item[1]:
                self.fail(f"column {first.text} needs a type", first)
            columns.append(Column(first.text, self.text(item[1], last), key=key, start=first.start))
        names = [c.name.lower() for c in columns]
        for j, n in enumerate(names):
            if n in names[:j]:
                raise SqlError(f"column {columns[j].name} is declared twice", *position(self.script, self.start))
        return columns

    def options(self) -> dict[str, str]:
        options: dict[str, str] = {}
        for item in self._parenthesised():
            tokens = [self.tokens[j] for j in item]
            if len(tokens) > 3 and tokens[1].token_type == TokenType.EQ:
                self.fail("expected ',' between options", tokens[3])
            if len(tokens) != 3 or tokens[1].token_type != TokenType.EQ:
                self.fail("expected name = 'value'", tokens[0])
            key, value = tokens[0], tokens[2]
            if not (_is_wordlike(key) or key.token_type == TokenType.STRING):
                self.fail("expected an option name", key)
            if value.token_type not in (TokenType.STRING, TokenType.NUMBER) and not _is_wordlike(value):
                self.fail("expected a value", value)
            name = key.text.lower()
            if name in options:
                self.fail(f"option {name} is given twice", key)
            options[name] = value.text
        return options

    def find_emit(self) -> int | None:
        """The index of a top-level EMIT CHANGES|FINAL (outside parentheses), or None."""
        depth = 0
        for j, t in enumerate(self.tokens):
            if t.token_type == TokenType.L_PAREN:
                depth += 1
            elif t.token_type == TokenType.R_PAREN:
                depth -= 1
            elif (depth == 0 and t.token_type in _WORDS and t.text.upper() == "EMIT"
                  and j + 1 < len(self.tokens) and self.tokens[j + 1].text.upper() in ("CHANGES", "FINAL")):
                return j
        return None

    def push_query(self, emit: int, statement: type = PushQuery, **extra) -> Statement:
        if emit == self.i:
            self.fail("expected a SELECT before EMIT")
        first = self.i
        self.check_spark(first, QUERY_STARTS)
        end = emit - 1
        limit = None
        # ksqlDB writes LIMIT after EMIT CHANGES; a LIMIT n right before it is taken the same way
        if (end - first >= 2 and self.tokens[end].token_type == TokenType.NUMBER
                and self.tokens[end - 1].token_type == TokenType.LIMIT):
            limit = self.count(self.tokens[end])
            end -= 2
        self.i = emit + 1
        final = self.word() == "FINAL"
        self.i += 1
        until_rows = until_seconds = None
        if self.accept("UNTIL"):
            t = self.peek()
            if t is not None and t.token_type == TokenType.NUMBER:
                self.i += 1
                until_rows = self.count(t)
                if not (self.accept("ROWS") or self.accept("ROW")):
                    self.fail("expected ROWS after UNTIL n")
            elif t is not None and t.token_type == TokenType.STRING:
                until_seconds = duration_seconds(t.text)
                if until_seconds is None:
                    self.fail("expected a duration like '5 minutes' or '30 seconds'", t)
                self.i += 1
            else:
                self.fail("expected UNTIL n ROWS or UNTIL 'duration'")
        if self.accept("LIMIT"):
            t = self.peek()
            if t is None or t.token_type != TokenType.NUMBER:
                self.fail("expected a number of rows after LIMIT")
            if limit is not None:
                self.fail("LIMIT is given twice", t)
            limit = self.count(t)
            self.i += 1
        if not self.at_end():
            self.fail("expected UNTIL or LIMIT after EMIT CHANGES, or the end of the statement")
        select = self.text(first, end)
        if statement is Explain:
            return Explain(**self.base(), select=select, select_start=self.tokens[first].start, **extra)
        return PushQuery(**self.base(), select=select, limit=limit, until_rows=until_rows,
                         until_seconds=until_seconds, final=final)

    def count(self, token: Token) -> int:
        if not token.text.isdigit() or int(token.text) < 1:
            self.fail("expected a whole number of rows, at least 1", token)
        return int(token.text)

    def show(self) -> Show:
        self.i += 1
        what = self.word().lower()
        self.i += 1
        extended = self.accept("EXTENDED")
        self.done()
        return Show(**self.base(), what=what, extended=extended)

    def describe(self) -> Statement:
        self.i += 1
        if self.word() in ("FUNCTION", "DATABASE", "SCHEMA", "CATALOG", "QUERY", "NAMESPACE"):
            return self.spark()
        self.accept("STREAM") or self.accept("TABLE")
        extended = self.accept("EXTENDED")
        if self.at_end():
            self.fail("expected the name of a stream or table")
        name = self.name("the name of a stream or table")
        extended = self.accept("EXTENDED") or extended
        if not self.at_end():
            return self.spark()  # DESCRIBE t column, partition specs...: Spark's
        return Describe(**self.base(), name=name, extended=extended)

    def explain(self) -> Statement:
        self.i += 1
        mode = self.word() if self.word() in ("EXTENDED", "CODEGEN", "COST", "FORMATTED") else ""
        if mode:
            self.i += 1
        if self.at_end():
            self.fail("expected a query to explain")
        emit = self.find_emit()
        if emit is not None:
            return self.push_query(emit, Explain, mode=mode)
        first = self.i
        self.check_spark(first, SPARK_STARTS)
        return Explain(**self.base(), select=self.text(first, len(self.tokens) - 1),
                       select_start=self.tokens[first].start, mode=mode)

    def drop(self) -> Drop:
        self.i += 1
        kind = self.word().lower()
        self.i += 1
        if_exists = self.accept("IF", "EXISTS")
        name = self.name(f"the {kind}'s name")
        delete_topic = self.accept("DELETE", "TOPIC")
        self.done()
        return Drop(**self.base(), kind=kind, name=name, delete_topic=delete_topic, if_exists=if_exists)

    def set_option(self) -> Statement:
        key = self.tokens[1].text
        if key.lower() not in FRESHET_PROPERTIES:
            return self.spark()
        self.i = 2
        t = self.peek()
        if t is None or t.token_type != TokenType.EQ:
            self.fail("expected =")
        self.i += 1
        value = self.peek()
        if value is None or value.token_type != TokenType.STRING:
            self.fail("expected a quoted value")
        self.i += 1
        self.done()
        return SetOption(**self.base(), key=key.lower(), value=value.text)


def _is_wordlike(token: Token) -> bool:
    """A name: a bare word (sqlglot gives many words a keyword type of their own), or a `quoted` one."""
    if token.token_type in _WORDS:
        return True
    return token.token_type not in (TokenType.STRING, TokenType.NUMBER) and bool(re.fullmatch(r"\w+", token.text))

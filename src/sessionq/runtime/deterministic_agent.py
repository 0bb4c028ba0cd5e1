"""The small deterministic agent the simulated runtime runs inside every Actor (and that
examples/agents/first_agent.py runs as a real process).

Pure logic, no I/O: `run_turn(memory, text)` computes one turn from the agent's memory (the Actor's
durable directory, a JSON object that survives suspend/resume and is copied into snapshots, tags
and forks) and the user's text, and returns the answer, the A2A task state the turn ends in, the
new memory and how long the turn should take.

What the agent understands (case-insensitive):

- simple integer arithmetic: "What is 2+2?" -> "2+2 = 4" (``+ - * /``, unary minus, parentheses;
  parsed by a small recursive-descent parser, never ``eval``);
- "Remember the number 7." -> stores 7; "What number did I ask you to remember?" recalls it;
- "What did I ask you first?" -> the first recorded question (not counting the current one);
- "Summarize this conversation so far." -> one line listing the previous questions in order;
- anything else -> a polite echo.

Control directives anywhere in the text are stripped before answering: ``[input-required]``,
``[auth-required]``, ``[fail]`` choose the end state (TASK_STATE_INPUT_REQUIRED / AUTH_REQUIRED /
FAILED; fail wins over auth-required, which wins over input-required; default COMPLETED) and
``[slow:SECONDS]`` sets the turn's delay (float seconds, clamped to 0..600; the last one counts).

A turn that ends INPUT_REQUIRED or AUTH_REQUIRED leaves the agent awaiting a reply: the next turn
(or any turn run with ``continuation=True``) is the user's answer and completes with
"Thanks, got: <text>". Every non-empty user text is recorded in order under ``questions``;
a turn that does not complete records its text but has no other effect (nothing is remembered).

Long texts: only a text of at most `INTENT_LIMIT` characters (directives stripped) is understood;
a longer one is echoed (its regular expressions would backtrack for minutes on a megabyte). An
answer quotes at most `QUOTE_LIMIT` characters of a user's text (then an ellipsis): the answer
travels in the task's status, history and artifact, so a long message is not copied three more times.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = [
    "AUTH_REQUIRED",
    "COMPLETED",
    "FAILED",
    "INPUT_REQUIRED",
    "MAX_DELAY",
    "TurnResult",
    "evaluate",
    "run_turn",
]

COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

MAX_DELAY = 600.0

# memory keys (the durable directory may hold other keys: they are preserved)
QUESTIONS = "questions"
REMEMBERED = "remembered_number"
AWAITING = "awaiting_input"

_MAX_EXPRESSION = 500  # characters
QUOTE_LIMIT = 500  # characters of a user's text an answer quotes
INTENT_LIMIT = 600  # characters of a text the agent tries to understand
_MAX_DEPTH = 64  # nesting of parentheses / unary signs


@dataclass(frozen=True)
class TurnResult:
    answer: str
    state: str  # an A2A TaskState name, e.g. "TASK_STATE_COMPLETED"
    memory: dict[str, Any]  # the new memory (a fresh copy; the input is never mutated)
    delay: float  # seconds the turn should take


# --------------------------------------------------------------------------------------------
# directives

_STATE_DIRECTIVE = re.compile(r"\[\s*(input-required|auth-required|fail)\s*\]", re.IGNORECASE)
_SLOW_DIRECTIVE = re.compile(r"\[\s*slow\s*:\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*\]", re.IGNORECASE)


def _directives(text: str) -> tuple[str, str, float]:
    """(text without directives and with normalised whitespace, end state, delay)."""
    states = {m.group(1).lower() for m in _STATE_DIRECTIVE.finditer(text)}
    delay = 0.0
    for m in _SLOW_DIRECTIVE.finditer(text):
        delay = min(max(float(m.group(1)), 0.0), MAX_DELAY)
    stripped = _SLOW_DIRECTIVE.sub(" ", _STATE_DIRECTIVE.sub(" ", text))
    if "fail" in states:
        state = FAILED
    elif "auth-required" in states:
        state = AUTH_REQUIRED
    elif "input-required" in states:
        state = INPUT_REQUIRED
    else:
        state = COMPLETED
    return " ".join(stripped.split()), state, delay


# --------------------------------------------------------------------------------------------
# arithmetic


class _ArithmeticError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(?:(\d+)|([-+*/()]))")


def _tokens(expr: str) -> list[str]:
    out: list[str] = []
    pos = 0
    expr = expr.replace("×", "*").replace("÷", "/").replace("−", "-")  # noqa: RUF001
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise _ArithmeticError(f"unexpected character {expr[pos:].lstrip()[:1]!r}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := ('+'|'-') factor | INT | '(' expr ')'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise _ArithmeticError("unexpected end of expression")
        self.pos += 1
        return tok

    def parse(self) -> Fraction:
        if not self.tokens:
            raise _ArithmeticError("empty expression")
        value = self.expr()
        if self.peek() is not None:
            raise _ArithmeticError(f"unexpected {self.peek()!r}")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value += self.term()
            else:
                value -= self.term()
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "*":
                value *= rhs
            elif rhs == 0:
                raise ZeroDivisionError("division by zero")
            else:
                value /= rhs
        return value

    def factor(self) -> Fraction:
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise _ArithmeticError("expression nested too deeply")
            tok = self.take()
            if tok == "-":
                return -self.factor()
            if tok == "+":
                return self.factor()
            if tok == "(":
                value = self.expr()
                if self.take() != ")":
                    raise _ArithmeticError("missing ')'")
                return value
            if tok.isdigit():
                return Fraction(int(tok))
            raise _ArithmeticError(f"unexpected {tok!r}")
        finally:
            self.depth -= 1


def evaluate(expr: str) -> Fraction:
    """Evaluate an integer arithmetic expression exactly. ValueError if it is not one,
    ZeroDivisionError on division by zero."""
    if len(expr) > _MAX_EXPRESSION:
        raise _ArithmeticError("expression too long")
    tokens = _tokens(expr)
    if not any(t.isdigit() for t in tokens):
        raise _ArithmeticError("no number")
    return _Parser(tokens).parse()


def _format_number(value: Fraction) -> str:
    """An integer as is; otherwise a decimal rounded to 6 places without trailing zeros."""
    if value.denominator == 1:
        return str(value.numerator)
    rounded = round(value, 6)
    sign = "-" if rounded < 0 else ""
    scaled = int(abs(rounded) * 10**6)
    whole, frac = divmod(scaled, 10**6)
    digits = f"{frac:06d}".rstrip("0")
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"


_ARITHMETIC_QUESTION = re.compile(
    r"^(?:what\s+is|what's|whats|calculate|compute|how\s+much\s+is)\s+(?P<expr>.+?)\s*[=?.!]*\s*$",
    re.IGNORECASE,
)
_BARE_EXPRESSION = re.compile(r"^(?P<expr>[\d\s()+\-*/×÷−]*\d[\d\s()+\-*/×÷−]*?)\s*[=?]*\s*$")  # noqa: RUF001


def _arithmetic(text: str) -> str | None:
    """The answer if the text asks for an arithmetic result, else None."""
    m = _ARITHMETIC_QUESTION.match(text)
    if m is None:
        m = _BARE_EXPRESSION.match(text)
        if m is None or not re.search(r"\d\s*\)*\s*[-+*/×÷−]", m.group("expr")):  # noqa: RUF001
            return None  # a bare number is not a calculation
    expr = m.group("expr").strip()
    try:
        value = evaluate(expr)
    except ZeroDivisionError:
        return f"{expr} cannot be computed: division by zero is undefined."
    except ValueError:
        return None
    return f"{expr} = {_format_number(value)}"


# --------------------------------------------------------------------------------------------
# intents

_RECALL_NUMBER = re.compile(r"\b(?:what|which)\s+number\b.*\bremember\b", re.IGNORECASE)
_FIRST_QUESTION = re.compile(
    r"\bwhat\s+did\s+i\s+(?:ask|say\s+to|tell)(?:\s+you)?\s+first\b"
    r"|\bwhat\s+was\s+my\s+first\s+(?:question|message)\b"
    r"|\bwhat\s+was\s+the\s+first\s+thing\s+i\s+(?:asked|said)\b",
    re.IGNORECASE,
)
_SUMMARIZE = re.compile(r"\bsummari[sz]e\b|\bsummary\b", re.IGNORECASE)
_REMEMBER = re.compile(r"\bremember\s+(?:the\s+)?(?:number\s+)?([+-]?\d+)(?![\d.,]\d)", re.IGNORECASE)


def _questions(memory: dict[str, Any]) -> list[str]:
    raw = memory.get(QUESTIONS)
    if not isinstance(raw, list):
        return []
    return [q for q in raw if isinstance(q, str)]


def _remembered(memory: dict[str, Any]) -> int | None:
    value = memory.get(REMEMBERED)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _quote(text: str) -> str:
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + "\u2026"


def _summary(previous: list[str]) -> str:
    if not previous:
        return "We have just started: you have not asked me anything before this."
    quoted = "; ".join(f'"{_quote(q)}"' for q in previous)
    noun = "question" if len(previous) == 1 else "questions"
    return f"So far you asked me {len(previous)} {noun}, in order: {quoted}"


def _answer(text: str, previous: list[str], memory: dict[str, Any]) -> tuple[str, int | None]:
    """The answer to a completed turn and the number to remember (None: keep the current one)."""
    if not text:
        return "I received an empty message. How can I help you?", None
    if len(text) > INTENT_LIMIT:
        return _echo(text), None
    if _RECALL_NUMBER.search(text):
        number = _remembered(memory)
        if number is None:
            return "You have not asked me to remember a number.", None
        return f"You asked me to remember the number {number}.", None
    if _FIRST_QUESTION.search(text):
        if not previous:
            return "You have not asked me anything before this.", None
        return f'You first asked: "{_quote(previous[0])}"', None
    if _SUMMARIZE.search(text):
        return _summary(previous), None
    m = _REMEMBER.search(text)
    if m is not None:
        number = int(m.group(1))
        return f"OK, I will remember the number {number}.", number
    arithmetic = _arithmetic(text)
    if arithmetic is not None:
        return arithmetic, None
    return _echo(text), None


def _echo(text: str) -> str:
    return (
        f'Thank you for your message: "{_quote(text)}". I can do simple arithmetic, remember a number,'
        " tell you what you asked first, and summarize our conversation."
    )


def run_turn(memory: dict[str, Any], text: str, *, continuation: bool | None = None) -> TurnResult:
    """Run one turn. `continuation` says whether the text answers a task that asked for input
    (None: the memory knows whether the previous turn ended awaiting a reply)."""
    new_memory: dict[str, Any] = copy.deepcopy(dict(memory)) if memory else {}
    clean, state, delay = _directives(text)
    previous = _questions(new_memory)
    awaiting = bool(new_memory.get(AWAITING))
    is_reply = awaiting if continuation is None else continuation

    quoted = _quote(clean)
    if state == FAILED:
        subject = f' "{quoted}"' if clean else ""
        answer = f"Sorry, I could not complete your request{subject}: the turn failed."
    elif state == INPUT_REQUIRED:
        subject = f' to answer "{quoted}"' if clean else ""
        answer = f"I need more information{subject}. Please reply with the missing details."
    elif state == AUTH_REQUIRED:
        subject = f' before I can answer "{quoted}"' if clean else ""
        answer = f"I need you to authorize access{subject}. Please authenticate, then reply."
    elif is_reply:
        answer = f"Thanks, got: {quoted}"
    else:
        answer, number = _answer(clean, previous, new_memory)
        if number is not None:
            new_memory[REMEMBERED] = number

    if clean:
        new_memory[QUESTIONS] = [*previous, clean]
    if state in (INPUT_REQUIRED, AUTH_REQUIRED):
        new_memory[AWAITING] = True
    else:
        new_memory.pop(AWAITING, None)
    return TurnResult(answer=answer, state=state, memory=new_memory, delay=delay)

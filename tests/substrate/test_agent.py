"""The simulated agent (sessionq.runtime.deterministic_agent): pure logic, no database."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from sessionq.runtime.deterministic_agent import (
    AUTH_REQUIRED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    MAX_DELAY,
    TurnResult,
    evaluate,
    run_turn,
)


def _conversation(memory: dict[str, Any], *texts: str) -> tuple[list[TurnResult], dict[str, Any]]:
    results = []
    for text in texts:
        result = run_turn(memory, text)
        results.append(result)
        memory = result.memory
    return results, memory


def test_tutorial_questions_in_order() -> None:
    results, memory = _conversation(
        {},
        "What is 2+2?",
        "Summarize this conversation so far.",
        "What did I ask you first?",
        "Remember the number 7.",
        "What number did I ask you to remember?",
    )
    assert [r.answer for r in results] == [
        "2+2 = 4",
        'So far you asked me 1 question, in order: "What is 2+2?"',
        'You first asked: "What is 2+2?"',
        "OK, I will remember the number 7.",
        "You asked me to remember the number 7.",
    ]
    assert all(r.state == COMPLETED and r.delay == 0 for r in results)
    assert memory["questions"] == [
        "What is 2+2?",
        "Summarize this conversation so far.",
        "What did I ask you first?",
        "Remember the number 7.",
        "What number did I ask you to remember?",
    ]
    assert memory["remembered_number"] == 7
    summary = run_turn(memory, "Summarize this conversation so far.").answer
    assert summary.startswith("So far you asked me 5 questions, in order: ")
    assert '"What is 2+2?"; "Summarize this conversation so far."; "What did I ask you first?"' in summary
    assert "\n" not in summary


def test_fresh_memory_answers() -> None:
    assert run_turn({}, "What did I ask you first?").answer == "You have not asked me anything before this."
    assert run_turn({}, "What number did I ask you to remember?").answer == (
        "You have not asked me to remember a number."
    )
    assert "not asked me anything" in run_turn({}, "Summarize this conversation so far.").answer


def test_memory_is_carried_and_never_mutated() -> None:
    memory: dict[str, Any] = {"unrelated": {"file": "kept"}}
    before = copy.deepcopy(memory)
    first = run_turn(memory, "Remember the number 42.")
    assert memory == before  # the input is untouched
    assert first.memory["unrelated"] == {"file": "kept"}
    second = run_turn(first.memory, "What number did I ask you to remember?")
    assert second.answer == "You asked me to remember the number 42."
    third = run_turn(second.memory, "remember the number -3")
    assert third.answer == "OK, I will remember the number -3."
    assert run_turn(third.memory, "Which number did I ask you to remember?").answer.endswith("number -3.")
    assert run_turn(second.memory, "What did I ask you first?").answer == (
        'You first asked: "Remember the number 42."'
    )


def test_first_question_does_not_count_the_current_one() -> None:
    r = run_turn({}, "What did I ask you first?")
    assert r.answer == "You have not asked me anything before this."
    assert run_turn(r.memory, "What did I ask you first?").answer == (
        'You first asked: "What did I ask you first?"'
    )


def test_fork_scenario() -> None:
    """A copy of memory taken after turn 2 (a checkpoint) diverges from the original."""
    _, memory = _conversation({}, "What is 2+2?", "Summarize this conversation so far.")
    fork = copy.deepcopy(memory)  # what a tag / fork carries
    assert run_turn(fork, "What did I ask you first?").answer == 'You first asked: "What is 2+2?"'
    source = run_turn(memory, "Remember the number 7.").memory
    assert run_turn(source, "What number did I ask you to remember?").answer == (
        "You asked me to remember the number 7."
    )
    fork_answer = run_turn(fork, "What number did I ask you to remember?")
    assert fork_answer.answer == "You have not asked me to remember a number."
    assert "remembered_number" not in fork_answer.memory


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("What is 2+2?", "2+2 = 4"),
        ("what is 2 + 2", "2 + 2 = 4"),
        ("What is 10 - 3 * 2?", "10 - 3 * 2 = 4"),
        ("What is (10 - 3) * 2?", "(10 - 3) * 2 = 14"),
        ("What is -3 * (2 + 1)?", "-3 * (2 + 1) = -9"),
        ("What is 8/2?", "8/2 = 4"),
        ("What is 7/2?", "7/2 = 3.5"),
        ("What is 1/3?", "1/3 = 0.333333"),
        ("What is 2-5?", "2-5 = -3"),
        ("What is ((2))?", "((2)) = 2"),
        ("Calculate 6*7.", "6*7 = 42"),
        ("What's 12345678901234567890 * 10?", "12345678901234567890 * 10 = 123456789012345678900"),
        ("3*(4+5)=", "3*(4+5) = 27"),
        ("What is 1/0?", "1/0 cannot be computed: division by zero is undefined."),
    ],
)
def test_arithmetic(text: str, answer: str) -> None:
    result = run_turn({}, text)
    assert result.answer == answer
    assert result.state == COMPLETED


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of France?",
        "What is 2 ** 3?",
        "What is __import__('os').system('true')?",
        "What is (2+3?",
        "What is 2 +?",
        "7",
    ],
)
def test_not_arithmetic_is_echoed(text: str) -> None:
    result = run_turn({}, text)
    assert result.answer.startswith(f'Thank you for your message: "{text}".')
    assert result.state == COMPLETED


def test_evaluate_is_exact_and_bounded() -> None:
    assert evaluate("2+2") == 4
    assert evaluate("1/3 + 1/3 + 1/3") == 1
    assert evaluate("-(-(4))") == 4
    assert evaluate("7/2") == Fraction(7, 2)
    for bad in ("", "()", "2 2", "a+1", "1 +", "(" * 100 + "1" + ")" * 100, "1+" * 300 + "1"):
        with pytest.raises(ValueError):
            evaluate(bad)
    with pytest.raises(ZeroDivisionError):
        evaluate("1/(2-2)")


@pytest.mark.parametrize(
    ("directive", "state"),
    [("[input-required]", INPUT_REQUIRED), ("[auth-required]", AUTH_REQUIRED), ("[fail]", FAILED)],
)
def test_state_directives_are_stripped(directive: str, state: str) -> None:
    result = run_turn({}, f"What is 2+2? {directive}")
    assert result.state == state
    assert directive not in result.answer and "2+2 = 4" not in result.answer
    assert result.memory["questions"] == ["What is 2+2?"]
    # anywhere in the text, any case
    assert run_turn({}, f"{directive.upper()}What is 2+2?").state == state


def test_directive_answers() -> None:
    assert run_turn({}, "Book a flight [input-required]").answer == (
        'I need more information to answer "Book a flight". Please reply with the missing details.'
    )
    assert "authorize" in run_turn({}, "[auth-required] Read my mail").answer
    assert run_turn({}, "[fail] Remember the number 9.").answer.startswith("Sorry, I could not complete")


def test_fail_wins_and_incomplete_turns_have_no_effect() -> None:
    assert run_turn({}, "x [input-required] [auth-required]").state == AUTH_REQUIRED
    assert run_turn({}, "x [input-required] [fail] [auth-required]").state == FAILED
    failed = run_turn({}, "Remember the number 9. [fail]")
    assert "remembered_number" not in failed.memory
    assert failed.memory["questions"] == ["Remember the number 9."]


def test_slow_directive() -> None:
    r = run_turn({}, "[slow:0.5] What is 2+2?")
    assert r.delay == 0.5 and r.answer == "2+2 = 4" and r.state == COMPLETED
    assert run_turn({}, "What is 1+1? [slow:3]").delay == 3.0
    assert run_turn({}, "[slow:100000] hi").delay == MAX_DELAY
    assert run_turn({}, "[slow:.25][fail]").delay == 0.25
    assert run_turn({}, "hi").delay == 0.0
    # malformed directives are not directives
    assert run_turn({}, "[slow:abc] hi").delay == 0.0


def test_input_required_then_reply() -> None:
    asked = run_turn({}, "Book a flight [input-required]")
    assert asked.state == INPUT_REQUIRED
    assert asked.memory["awaiting_input"] is True
    reply = run_turn(asked.memory, "to Paris on Monday")
    assert reply.state == COMPLETED
    assert reply.answer == "Thanks, got: to Paris on Monday"
    assert "awaiting_input" not in reply.memory
    assert reply.memory["questions"] == ["Book a flight", "to Paris on Monday"]
    # after the reply the agent is back to normal
    assert run_turn(reply.memory, "What is 2+2?").answer == "2+2 = 4"
    # a reply may ask for input again
    again = run_turn(asked.memory, "Paris [input-required]")
    assert again.state == INPUT_REQUIRED and again.memory["awaiting_input"] is True


def test_continuation_flag_overrides_memory() -> None:
    assert run_turn({}, "blue", continuation=True).answer == "Thanks, got: blue"
    asked = run_turn({}, "Pick a colour [input-required]")
    fresh = run_turn(asked.memory, "What is 2+2?", continuation=False)
    assert fresh.answer == "2+2 = 4"
    assert "awaiting_input" not in fresh.memory


def test_tolerates_foreign_memory() -> None:
    foreign = {"questions": "not a list", "remembered_number": "x"}
    r = run_turn(foreign, "What number did I ask you to remember?")
    assert r.answer == "You have not asked me to remember a number."
    assert r.memory["questions"] == ["What number did I ask you to remember?"]
    assert run_turn({}, "[fail]").memory.get("questions") is None  # nothing to record
    assert run_turn({}, "   ").answer == "I received an empty message. How can I help you?"

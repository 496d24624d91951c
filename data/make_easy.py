"""Writes `easy.jsonl`: one- and two-step arithmetic word problems with their answers, in the
MATH-500 format (`problem`, `solution`, `answer`, `level` = the number of steps, `unique_id`),
from a fixed seed — `python -m spex.data.make_easy` rewrites the shipped file byte for byte.
A set a small model can be measured on; MATH-500 level 1 is the next step up."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["COUNT", "SEED", "easy_rows", "main"]

SEED = 0
COUNT = 100  # half one-step, half two-step, alternating

NAMES = ["Sam", "Ana", "Leo", "Mia", "Tom", "Zoe", "Ben", "Ivy"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "cards", "shells"]

Row = tuple[str, str, int]  # problem, solution, answer


def _one_step(r: random.Random) -> Row:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    kind = r.randrange(4)
    if kind == 0:
        a, b = r.randint(2, 20), r.randint(2, 20)
        return (
            f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
            f"{a} + {b} = {a + b}",
            a + b,
        )
    if kind == 1:
        b = r.randint(2, 15)
        a = b + r.randint(1, 15)
        return (
            f"{name} had {a} {item} and gave away {b}. How many {item} are left?",
            f"{a} - {b} = {a - b}",
            a - b,
        )
    if kind == 2:
        a, b = r.randint(2, 9), r.randint(2, 9)
        return (
            f"Each box holds {a} {item}. How many {item} are in {b} boxes?",
            f"{a} × {b} = {a * b}",
            a * b,
        )
    b, each = r.randint(2, 6), r.randint(2, 8)
    return (
        f"{b * each} {item} are shared equally among {b} friends. How many {item} does each friend get?",
        f"{b * each} ÷ {b} = {each}",
        each,
    )


def _two_step(r: random.Random) -> Row:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    kind = r.randrange(3)
    if kind == 0:
        a, b = r.randint(3, 20), r.randint(2, 15)
        c = r.randint(1, a + b - 1)
        return (
            f"{name} has {a} {item}, buys {b} more and then gives {c} to a friend. "
            f"How many {item} does {name} have now?",
            f"{a} + {b} = {a + b}; {a + b} - {c} = {a + b - c}",
            a + b - c,
        )
    if kind == 1:
        packs, per, had = r.randint(2, 6), r.randint(2, 9), r.randint(1, 12)
        return (
            f"{name} buys {packs} packs of {per} {item} and already had {had}. "
            f"How many {item} does {name} have in all?",
            f"{packs} × {per} = {packs * per}; {packs * per} + {had} = {packs * per + had}",
            packs * per + had,
        )
    rows, per = r.randint(2, 8), r.randint(2, 9)
    taken = r.randint(1, rows * per - 1)
    return (
        f"A room has {rows} rows of {per} chairs. {taken} chairs are taken. How many chairs are free?",
        f"{rows} × {per} = {rows * per}; {rows * per} - {taken} = {rows * per - taken}",
        rows * per - taken,
    )


def easy_rows(seed: int = SEED, count: int = COUNT) -> list[dict[str, object]]:
    r = random.Random(seed)
    makers: list[Callable[[random.Random], Row]] = [_one_step, _two_step]
    rows = []
    for i in range(count):
        steps = 1 + i % 2
        problem, solution, answer = makers[steps - 1](r)
        rows.append(
            {
                "problem": problem,
                "solution": f"{solution}. The answer is $\\boxed{{{answer}}}$.",
                "answer": str(answer),
                "level": steps,
                "unique_id": f"easy/{i:03d}",
            }
        )
    return rows


def main(out: str | None = None) -> int:
    path = Path(out) if out else Path(__file__).with_name("easy.jsonl")
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in easy_rows()))
    print(f"{path}: {COUNT} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:2]))

"""Spawned workers run the user's script again: a conversion called at its top level, without
`if __name__ == "__main__":`, would start workers that start workers, for ever (a Pool replaces
each worker that dies while starting). Found before the first worker starts, from the script's
own source, and said in one line.
"""

from __future__ import annotations

import ast
import sys
import tokenize
from types import FrameType

from feedgpu.errors import UsageError


def check_main_guard(frame: FrameType | None = None) -> None:
    """Raise UsageError if the running script calls us from its top level, outside the guard.

    Scripts run with -c, notebooks and the interactive prompt are not re-run by a spawned
    worker. The frame that counts is the script's own top level: a function called from there
    is refused too, one called from inside the guard is not.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    if main is None or not path or name == "__main__" or name.endswith(".__main__"):
        return  # multiprocessing re-runs neither (python -m pkg runs pkg/__main__.py)
    frame = frame or sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return
    line = frame.f_lineno
    try:
        with tokenize.open(path) as f:  # the script's declared encoding (PEP 263)
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return  # no source to read: nothing said rather than a guess
    guards = [node for node in ast.walk(tree) if isinstance(node, ast.If) and _is_guard(node)]
    inside = [(g.body[0].lineno, g.body[-1].end_lineno or g.body[-1].lineno) for g in guards]
    if not any(first <= line <= last for first, last in inside):  # the body, not its else
        raise UsageError(
            f"{path}, line {line}: this script converts at its top level, and each worker "
            "process runs the script again; put the call under "
            '`if __name__ == "__main__":` (or in a function called from there)'
        )


def _is_guard(node: ast.If) -> bool:
    """`if __name__ == "__main__":` (either operand order), alone or first among `and`s."""
    test = node.test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[0]
    if not isinstance(test, ast.Compare):
        return False
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]

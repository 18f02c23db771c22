"""The `args` a config hands to a class named by import path (a reward worker, an env), checked against the class's
constructor without calling it: the worker may start processes, the run has not started yet.

Every name must be a parameter (a misspelt one is named with the closest match) and every value must fit the
parameter's annotation, `Literal` choices included (`answer_fallback: bogus`, `sandbox: htp`), checked strictly
with pydantic (a string is not an int). A parameter without a resolvable annotation is not type-checked. A new
worker gets these checks by annotating its constructor, nothing else.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from typing import Any, Callable

from pydantic import TypeAdapter, ValidationError

from rlvr.config.base import ConfigError


def _hints(fn: Callable) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # an annotation that names something not importable at run time: no type checks
        return {}


def check_call_args(cls: type, args: dict[str, Any], key: str, fixed: tuple[str, ...] = ()) -> None:
    """Raise a ConfigError keyed `key` (or `key.<name>`) when `cls(**fixed_values, **args)` would be rejected for
    its argument names or types. `fixed` are the parameters the framework passes itself (domain, limits): not
    allowed in `args`."""
    signature = inspect.signature(cls.__init__)
    params = {n: p for n, p in list(signature.parameters.items())[1:]}  # without self
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    allowed = [n for n, p in params.items() if n not in fixed
               and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    for name in args:
        if name in fixed:
            raise ConfigError(f"'{name}' is set by the pipeline, not in args", key=f"{key}.{name}")
        if name not in allowed and not takes_any:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(f"{cls.__name__} has no argument '{name}'; {hint}it takes: {', '.join(allowed)}",
                              key=f"{key}.{name}")
    missing = [n for n in allowed if params[n].default is inspect.Parameter.empty and n not in args]
    if missing:
        raise ConfigError(f"{cls.__name__} needs {', '.join(missing)}", key=key)
    hints = _hints(cls.__init__)
    for name, value in args.items():
        if name not in hints:
            continue
        try:
            TypeAdapter(hints[name]).validate_python(value, strict=True)
        except ValidationError as err:
            first = err.errors()[0]
            raise ConfigError(f"{value!r} is not valid: {first['msg']}", key=f"{key}.{name}") from None
        except Exception:  # a type pydantic cannot build a validator for (an arbitrary class): unchecked
            continue

"""rlvr.config.call_args: a class's config `args` checked against its constructor without calling it."""

from __future__ import annotations

from typing import Literal

import pytest

from rlvr.config.base import ConfigError
from rlvr.config.call_args import check_call_args


class Worker:
    def __init__(self, domain: str, limits: object = None, mode: Literal["a", "b"] = "a", size: int = 2,
                 scale: float = 1.0, extra: dict[str, int] | None = None, *, name: str = "w") -> None:
        raise AssertionError("never built by the check")


class NeedsPath:
    def __init__(self, path: str, verbose: bool = False) -> None:
        pass


class TakesAnything:
    def __init__(self, size: int = 1, **kwargs) -> None:
        pass


def check(cls: type, args: dict) -> None:
    check_call_args(cls, args, "domains.d.reward.args", fixed=("domain", "limits"))


def test_good_arguments_pass_without_building_the_class():
    check(Worker, {"mode": "b", "size": 3, "scale": 2, "extra": {"k": 1}, "name": "x"})  # an int is a float too
    check(NeedsPath, {"path": "/x"})


@pytest.mark.parametrize("args,message", [
    ({"mdoe": "a"}, r"domains\.d\.reward\.args\.mdoe: Worker has no argument 'mdoe'; did you mean 'mode'\? "
                    r"it takes: mode, size, scale, extra, name"),
    ({"zzz": 1}, r"args\.zzz: Worker has no argument 'zzz'; it takes"),
    ({"mode": "c"}, r"args\.mode: 'c' is not valid: Input should be 'a' or 'b'"),
    ({"size": "3"}, r"args\.size: '3' is not valid: Input should be a valid integer"),
    ({"size": 2.5}, r"args\.size: 2\.5 is not valid"),
    ({"extra": {"k": "v"}}, r"args\.extra: \{'k': 'v'\} is not valid"),
    ({"domain": "x"}, r"args\.domain: 'domain' is set by the pipeline"),
])
def test_a_bad_argument_is_named_with_what_is_wrong(args, message):
    with pytest.raises(ConfigError, match=message):
        check(Worker, args)


def test_a_missing_required_argument_is_named():
    with pytest.raises(ConfigError, match=r"^domains\.d\.reward\.args: NeedsPath needs path$") as err:
        check(NeedsPath, {"verbose": True})
    assert err.value.key == "domains.d.reward.args"


def test_a_class_taking_any_keyword_still_checks_the_annotated_ones():
    check(TakesAnything, {"size": 2, "whatever": object()})
    with pytest.raises(ConfigError, match=r"args\.size"):
        check(TakesAnything, {"size": "big"})

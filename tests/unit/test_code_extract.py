"""extract_code: the last block in the language, else the last untagged block, else None; reasoning ignored."""

import pytest

from rlvr.workers.rewards.code_extract import code_blocks, extract_code


@pytest.mark.parametrize(
    "text, language, expected",
    [
        ("```python\nprint(1)\n```", "python", "print(1)\n"),
        ("```py\nx = 1\n```", "python", "x = 1\n"),
        ("```Python3 title='a.py'\nx = 2\n```", "python", "x = 2\n"),
        ("first\n```python\na = 1\n```\nthen\n```python\nb = 2\n```\n", "python", "b = 2\n"),
        # a tagged block beats a later untagged one
        ("```python\nreal()\n```\n```\nshell output\n```", "python", "real()\n"),
        # no tagged block: the last untagged one
        ("```\none()\n```\n```\ntwo()\n```", "python", "two()\n"),
        # another language's block is not ours, and not a fallback either
        ("```cpp\nint main(){}\n```", "python", None),
        ("```cpp\nint main(){}\n```", "cpp", "int main(){}\n"),
        ("```c++\nint main(){}\n```", "cpp", "int main(){}\n"),
        ("```c\nint main(void){}\n```\n```python\nx\n```", "c", "int main(void){}\n"),
        ("no code at all", "python", None),
        ("", "python", None),
        # backticks inside the code do not end the block; a longer fence holds a shorter one
        ("```python\ns = '```'\nprint(s)\n```", "python", "s = '```'\nprint(s)\n"),
        ("````python\n```\nnested\n```\n````", "python", "```\nnested\n```\n"),
        ("~~~python\nx = 3\n~~~", "python", "x = 3\n"),
        # an unclosed block (cut off by the length limit) is not trusted
        ("```python\ndef f():\n    return", "python", None),
        ("```python\nok()\n```\n```python\ndef f(", "python", "ok()\n"),
        # empty blocks are skipped
        ("```python\nx = 1\n```\n```python\n\n```", "python", "x = 1\n"),
        ("```python\n```", "python", None),
        # indented fences (list items) count
        ("1. do this:\n   ```python\n   y = 1\n   ```", "python", "   y = 1\n"),
        # chat-template leftovers after the block do not matter
        ("```python\nz = 1\n```<|im_end|>", "python", "z = 1\n"),
    ],
)
def test_extract_code(text, language, expected):
    assert extract_code(text, language) == expected


def test_code_inside_thinking_is_ignored():
    text = "<think>Draft:\n```python\nwrong()\n```\n</think>\nFinal:\n```python\nright()\n```"
    assert extract_code(text) == "right()\n"
    # only thinking: nothing to run
    assert extract_code("<think>```python\nwrong()\n```</think> I give up.") is None
    # several think blocks: everything up to the last </think> goes
    text = "<think>a</think>```python\nmiddle()\n```<think>b</think>```python\nlast()\n```"
    assert extract_code(text) == "last()\n"
    # reasoning cut off inside <think>: no final code
    assert extract_code("```python\nx()\n```\n<think>more ```python\ny()\n```") == "x()\n"


def test_the_opening_think_tag_may_be_in_the_prompt():
    assert extract_code("reasoning ```python\nno()\n```</think>```python\nyes()\n```") == "yes()\n"


def test_code_blocks_lists_tags_and_bodies():
    assert code_blocks("```Python\na\n```\n```\nb\n```") == [("python", "a\n"), ("", "b\n")]


def test_unknown_language_is_rejected():
    with pytest.raises(ValueError, match="language"):
        extract_code("```rust\nfn main(){}\n```", "rust")

"""Token-level chat formatting of a growing conversation, for multi-turn rollouts.

An episode's sequence is built by appending, never by re-tokenising the whole conversation: the first prompt
(chat template of [system?, user: first observation] with the generation prompt), then each policy turn exactly as
generated, then each observation wrapped as the template wraps a user turn followed by the assistant's generation
prompt. So every turn's prompt extends the previous turn's full sequence token for token (vLLM's prefix cache
serves it), and the trainer sees exactly the tokens the policy generated.

The wrapper around an observation is read off the tokenizer's own chat template, by rendering a conversation
with placeholder texts and cutting at them; the end-of-turn text the template puts after an assistant message is
dropped when the policy's turn already ended with it (its EOS token). Observation text is tokenised with special
tokens split, so an environment cannot forge turn boundaries.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.dataset import _flat_ids

_ACTION, _OBSERVATION = "\x00RLVR-ACTION\x00", "\x00RLVR-OBSERVATION\x00"


class TurnCodec:
    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": _ACTION},
             {"role": "user", "content": _OBSERVATION}], tokenize=False, add_generation_prompt=True)
        if _ACTION not in rendered or _OBSERVATION not in rendered:
            raise ValueError("the tokenizer's chat template drops message contents; multi-turn rollouts need it "
                             "to render assistant and user turns")
        between = rendered.split(_ACTION, 1)[1]
        self._before, self._after = between.split(_OBSERVATION, 1)
        eos = tokenizer.eos_token or ""
        self._eos_text = eos if eos and self._before.startswith(eos) else ""
        self.eos_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()

    def first_prompt(self, observation: str, system_prompt: str | None) -> tuple[list[dict[str, str]], list[int]]:
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": observation}]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return messages, _flat_ids(ids, "first observation")

    def observation_ids(self, observation: str, turn_ids: list[int]) -> list[int]:
        """Tokens that follow a policy turn `turn_ids`: the end of the assistant turn (unless the policy's EOS
        already ended it), the observation as a user turn, and the assistant's generation prompt."""
        before = self._before
        if self._eos_text and turn_ids and turn_ids[-1] in self.eos_ids:
            before = before[len(self._eos_text):]
        return (self._encode(before, split=False) + self._encode(observation, split=True)
                + self._encode(self._after, split=False))

    def _encode(self, text: str, split: bool) -> list[int]:
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])

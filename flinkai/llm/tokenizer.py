"""Text <-> token ids and the model's chat template, with no transformers import.

The template is the Jinja text from the model's own tokenizer config, rendered the
way transformers renders it: an immutable sandboxed environment with ``trim_blocks``,
``lstrip_blocks`` and loop controls, ``raise_exception``, ``strftime_now`` and a
``tojson`` filter, and the special tokens passed as variables. The rendered text is
then encoded without adding special tokens, as ``apply_chat_template`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from flinkai.llm.errors import LlmError

__all__ = ["ChatTemplateError", "LlmTokenizer", "Message", "compile_chat_template"]

#: One chat message: ``{"role": "user", "content": "..."}``.
Message = Mapping[str, str]


class ChatTemplateError(LlmError, ValueError):
    """The chat template rejected the messages or failed to render."""


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(f"chat template: {message}")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template in a sandbox (templates come with model files)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"cannot compile the chat template: {e}") from e


class LlmTokenizer:
    """The model's BPE tokenizer plus its chat template and special tokens.

    Args:
        tokenizer_file: ``tokenizer.json`` of the model.
        chat_template: Jinja source of the model's chat template.
        special_tokens: Template variables such as ``bos_token`` and ``eos_token``.
    """

    def __init__(
        self,
        tokenizer_file: str | Path,
        chat_template: str,
        special_tokens: Mapping[str, str] | None = None,
    ) -> None:
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self.chat_template = chat_template
        self.special_tokens = dict(special_tokens or {})
        self._template = compile_chat_template(chat_template)

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def token_id(self, token: str) -> int | None:
        """The id of one token, or None if the vocabulary lacks it."""
        found = self._tokenizer.token_to_id(token)
        return None if found is None else int(found)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as is (no special tokens added)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``token_ids``; special tokens are dropped unless asked for."""
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def render_chat(
        self, messages: Sequence[Message], *, add_generation_prompt: bool = True
    ) -> str:
        """The prompt text the chat template makes of ``messages``."""
        if not messages:
            raise ChatTemplateError("a chat needs at least one message")
        for m in messages:
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ChatTemplateError(f"a message needs string role and content, got {m!r}")
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"cannot render the chat template: {e}") from e

    def apply_chat_template(
        self, messages: Sequence[Message], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of the rendered chat, ready to prefill."""
        return self.encode(self.render_chat(messages, add_generation_prompt=add_generation_prompt))

"""The project's fixed set of 20 chat prompts, shared by the decoder tests and benches.

1 to 6 AG News items per chat, with five instructions, some system turns and some
earlier turns: 70 to 520 tokens after SmolLM2's template. The same list everywhere
means a claim such as "greedy tokens are unchanged" is checked on the same inputs.
"""

from __future__ import annotations

from flinkai.datasets import load_ag_news

__all__ = ["INSTRUCTIONS", "N_PROMPTS", "chat_prompts"]

N_PROMPTS = 20
INSTRUCTIONS = (
    "Summarise this news item in one sentence.",
    "What is the topic of this article? Answer with one word, then explain.",
    "Write a short headline for the following text.",
    "List three facts from this text.",
    "Explain this to a ten-year-old.",
)


def chat_prompts() -> list[list[dict[str, str]]]:
    """20 chats of varied length: 1 to 6 AG News items, some with a system turn or history."""
    texts = [text for _, text in load_ag_news(limit=120)]
    chats: list[list[dict[str, str]]] = []
    start = 0
    for i in range(N_PROMPTS):
        n_items = 1 + (i * 3) % 6
        body = "\n".join(texts[start : start + n_items])
        start += n_items
        chat = [{"role": "user", "content": f"{INSTRUCTIONS[i % len(INSTRUCTIONS)]}\n\n{body}"}]
        if i % 4 == 1:
            chat.insert(0, {"role": "system", "content": "You are a concise news editor."})
        if i % 7 == 3:
            chat[-1:-1] = [
                {"role": "user", "content": "Hello!"},
                {"role": "assistant", "content": "Hello! How can I help you today?"},
            ]
        chats.append(chat)
    return chats

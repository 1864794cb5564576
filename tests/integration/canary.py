"""Find a planted secret in text, plain or base64-encoded at any byte alignment."""

from __future__ import annotations

import base64
from collections.abc import Mapping

__all__ = ["encodings", "leaks"]


def encodings(secret: str) -> set[str]:
    """``secret`` itself and the base64 runs that appear wherever it is base64-encoded.

    Base64 maps 3 bytes to 4 characters, so the secret's encoding depends on its
    offset mod 3 in the encoded data; the middle of each of the 3 variants is stable.
    """
    raw = secret.encode()
    found = {secret}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw).decode()
            # drop the chars mixing in the padding bytes or the unknown next ones
            start = (shift * 4 + 2) // 3 + 1
            found.add(text[start : len(text) - 4])
    return {f for f in found if len(f) >= 8}


def leaks(secret: str, channels: Mapping[str, str]) -> list[str]:
    """Names of the channels whose text carries ``secret`` (plain or base64)."""
    needles = encodings(secret)
    return sorted(name for name, text in channels.items() if any(n in text for n in needles))

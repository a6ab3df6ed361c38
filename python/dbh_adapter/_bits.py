"""Bit-exact fingerprints: a loss's float32 bits and the parameters' checksum
(equal bits, equal runs: `dbh repeat`, expect.deterministic)."""

from __future__ import annotations

import hashlib
import math
import struct

import torch


def float_bits(x: torch.Tensor | float) -> int:
    """The float32 bit pattern of `x` (a tensor or a number): equal bits, equal runs."""
    value = float(x.detach().float().cpu()) if isinstance(x, torch.Tensor) else float(x)
    try:
        packed = struct.pack("<f", value)
    except OverflowError:  # beyond float32's range: what the cast to float32 gives
        packed = struct.pack("<f", math.copysign(math.inf, value))
    bits: int = struct.unpack("<I", packed)[0]
    return bits


def checksum(model: torch.nn.Module | None) -> str:
    """The final parameters' bits as 16 hex digits: equal runs, equal checksums."""
    if model is None:
        return ""
    h = hashlib.blake2b(digest_size=8)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            h.update(name.encode())
            h.update(tensor_bytes(p.detach().contiguous().cpu()))
    return h.hexdigest()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A contiguous CPU tensor's bytes."""
    if t.numel() == 0:
        return b""
    raw = t.reshape(-1).view(torch.uint8)
    try:
        return raw.numpy().tobytes()
    except (RuntimeError, ImportError):  # torch without numpy
        return bytes(raw.tolist())

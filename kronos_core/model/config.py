"""Configuration dataclasses for the two published modules.

The field names are exactly the constructor keywords stored in a checkpoint's
``config.json``; ``from_dict`` rejects missing and unknown keys with a message
that names them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar


class _Config(Protocol):
    """What ``_from_dict`` needs of a config class: a dataclass with ``validate``."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def validate(self) -> None: ...


T = TypeVar("T", bound=_Config)


class ConfigError(ValueError):
    """A ``config.json`` that does not describe a valid Kronos module."""


def _from_dict(cls: type[T], data: dict[str, Any], what: str) -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{what} config must be a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    missing = sorted(required - data.keys())
    unknown = sorted(data.keys() - names)
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unknown:
            parts.append(f"unknown keys {unknown}")
        raise ConfigError(f"{what} config: {'; '.join(parts)}")
    obj = cls(**{k: data[k] for k in names if k in data})
    obj.validate()
    return obj


@dataclass(frozen=True)
class TokenizerConfig:
    """Hyper-parameters of ``KronosTokenizer`` (binary spherical quantisation auto-encoder)."""

    d_in: int
    d_model: int
    n_heads: int
    ff_dim: int
    n_enc_layers: int
    n_dec_layers: int
    s1_bits: int
    s2_bits: int
    ffn_dropout_p: float = 0.0
    attn_dropout_p: float = 0.0
    resid_dropout_p: float = 0.0
    beta: float = 0.05
    gamma0: float = 1.0
    gamma: float = 1.1
    zeta: float = 0.05
    group_size: int = 4

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenizerConfig:
        return _from_dict(cls, data, "tokenizer")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"tokenizer d_model {self.d_model} not divisible by n_heads {self.n_heads}"
            )
        if self.n_enc_layers < 1 or self.n_dec_layers < 1:
            raise ConfigError("tokenizer needs n_enc_layers >= 1 and n_dec_layers >= 1")
        if not (1 <= self.s1_bits <= 30 and 1 <= self.s2_bits <= 30):
            raise ConfigError(
                f"bit widths out of range: s1_bits={self.s1_bits}, s2_bits={self.s2_bits}"
            )

    @property
    def codebook_dim(self) -> int:
        return self.s1_bits + self.s2_bits


@dataclass(frozen=True)
class KronosConfig:
    """Hyper-parameters of the autoregressive ``Kronos`` predictor."""

    s1_bits: int
    s2_bits: int
    n_layers: int
    d_model: int
    n_heads: int
    ff_dim: int
    ffn_dropout_p: float = 0.0
    attn_dropout_p: float = 0.0
    resid_dropout_p: float = 0.0
    token_dropout_p: float = 0.0
    learn_te: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KronosConfig:
        return _from_dict(cls, data, "model")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model d_model {self.d_model} not divisible by n_heads {self.n_heads}"
            )
        if self.d_model % DEP_HEADS:
            raise ConfigError(
                f"model d_model {self.d_model} not divisible by {DEP_HEADS} (s2 head)"
            )
        if not (1 <= self.s1_bits <= 30 and 1 <= self.s2_bits <= 30):
            raise ConfigError(
                f"bit widths out of range: s1_bits={self.s1_bits}, s2_bits={self.s2_bits}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


DEP_HEADS = 4  # the s2 head's cross-attention always has 4 heads, whatever n_heads is

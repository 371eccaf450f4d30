"""Strict reading of TOML input files, shared by every loader.

A :class:`Table` wraps one TOML table and is consumed key by key: each ``take_*`` call checks the
type and range of one key, and :meth:`Table.finish` rejects the keys nobody asked for. Every
failure is an :class:`~simulator.errors.InputError` whose one-line message names the file, the
table, the key and the value::

    simulator/hardware/presets/wafer.toml [mesh]: unknown key 'bandwith_GB_per_s'
    my.toml [device.peak]: key 'fp16_TFLOP_per_s' must be a positive number, got -3

Units live in key names (see ``UNITS``) and are converted to SI exactly once, here, by
:meth:`Table.take_quantity`: ``hop_latency_ns = 1`` becomes ``hop_latency_s = 1e-9``.
"""

from __future__ import annotations

import difflib
import math
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from simulator.errors import InputError

UNITS: dict[str, tuple[str, float]] = {
    "_GB_per_s": ("_bytes_per_s", 1e9),
    "_Gb_per_s": ("_bytes_per_s", 1e9 / 8),
    "_TB_per_s": ("_bytes_per_s", 1e12),
    "_TFLOP_per_s": ("_flop_per_s", 1e12),
    "_TOP_per_s": ("_flop_per_s", 1e12),
    "_GiB": ("_bytes", 2**30),
    "_MiB": ("_bytes", 2**20),
    "_GB": ("_bytes", 1e9),
    "_MB": ("_bytes", 1e6),
    "_ns": ("_s", 1e-9),
    "_us": ("_s", 1e-6),
    "_s": ("_s", 1.0),
    "_bytes_per_s": ("_bytes_per_s", 1.0),
    "_flop_per_s": ("_flop_per_s", 1.0),
    "_bytes": ("_bytes", 1.0),
}
"""Unit suffix of a file key -> (SI suffix of the attribute, factor to SI). Longest match wins."""

SOURCE_SUFFIX = "_source"

PLAUSIBLE: dict[str, tuple[float, float, str]] = {
    "_efficiency": (0.01, 1.0, "an achieved fraction of peak; under 1% is a unit slip"),
    "_bytes_per_s": (1e6, 1e17, "1 MB/s to 100 PB/s, about 5x Cerebras WSE-3's whole-wafer SRAM bandwidth"),
    "_flop_per_s": (1e6, 1e18, "up to 1 EFLOP/s a device, 8x Cerebras WSE-3's 125 PFLOP/s"),
    "_bytes": (1e3, 1e15, "1 kB to 1 PB a device; an NVL72 rack holds 13.5 TB of HBM"),
    "_s": (0.0, 1.0, "at most 1 s: a latency or overhead that long is a unit slip"),
    "": (1.0, 2.0**20, "a count of at most 2^20"),
}
"""SI suffix of a hardware quantity -> (minimum, maximum, why): the plausible range a file's
value must lie in, wide enough for any chip announced and narrow enough to catch a wrong unit or
a typo (longest suffix first; no suffix: a count)."""


def split_unit(key: str) -> tuple[str, str, float]:
    """Split a file key into its stem, the SI name and the factor to SI.

    ``"hop_latency_ns"`` -> ``("hop_latency", "hop_latency_s", 1e-9)``; a key without a unit
    suffix is dimensionless: ``"dies_x"`` -> ``("dies_x", "dies_x", 1.0)``.
    """
    for suffix in sorted(UNITS, key=len, reverse=True):
        if key.endswith(suffix) and len(key) > len(suffix):
            si_suffix, factor = UNITS[suffix]
            stem = key[: -len(suffix)]
            return stem, stem + si_suffix, factor
    return key, key, 1.0


def read_toml(path: str | Path, display: str | None = None) -> Table:
    """Parse a TOML file into its root :class:`Table`.

    Args:
        path: file to read.
        display: the name used in error messages (default: ``path`` as given).

    Raises:
        InputError: the file is missing or not valid TOML (with tomllib's line and column).
    """
    return parse_toml(read_text_file(path, display), display or str(path))


MAX_INPUT_BYTES = 16 * 2**20
"""Largest input file read (bytes): a model, hardware, strategy or study file is a few kB; one of
16 MiB is a wrong path, and reading it would only delay the error."""


def read_text_file(path: str | Path, display: str | None = None) -> str:
    """The UTF-8 text of the input file ``path``, checked before it is opened.

    Raises:
        InputError: one line naming the file: missing, unreadable, a symlink loop, not a regular
            file (a directory, a FIFO, a device: opening a FIFO would wait for a writer), larger
            than :data:`MAX_INPUT_BYTES`, or not UTF-8 text.
    """
    name = display or str(path)
    try:
        info = Path(path).stat()
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{name}: not a regular file (a {_file_kind(info.st_mode)})")
        if info.st_size > MAX_INPUT_BYTES:
            raise InputError(f"{name}: {info.st_size:,} bytes, more than an input file's "
                             f"{MAX_INPUT_BYTES:,}")
        data = Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"{name}: cannot read file ({error.strerror or error})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{name}: not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start})") from None


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((name for test, name in kinds if test(mode)), "special file")


def parse_toml(text: str, display: str) -> Table:
    """Parse TOML text into its root :class:`Table`; ``display`` names it in errors.

    Raises:
        InputError: the text is not valid TOML (message has tomllib's line and column).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{display}: invalid TOML: {error}") from None
    return Table(file=display, path="", data=data)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(slots=True)
class Table:
    """One TOML table being consumed key by key.

    Attributes:
        file: the file name shown in messages.
        path: dotted path of this table in the file (``""`` for the root).
        data: the parsed table.
    """

    file: str
    path: str
    data: dict[str, Any]
    _taken: set[str] = field(default_factory=set)

    def error(self, message: str) -> InputError:
        """An :class:`InputError` prefixed with the file and the table."""
        where = f"{self.file} [{self.path}]" if self.path else self.file
        return InputError(f"{where}: {message}")

    def keys(self) -> list[str]:
        """Keys of this table, in file order."""
        return list(self.data)

    def has(self, key: str) -> bool:
        """True when the table holds ``key``."""
        return key in self.data

    def _get(self, key: str) -> Any:
        if key not in self.data:
            raise self.error(f"missing key '{key}'")
        self._taken.add(key)
        return self.data[key]

    def take_table(self, key: str) -> Table:
        """The sub-table ``key``.

        Raises:
            InputError: missing, or not a table.
        """
        value = self._get(key)
        if not isinstance(value, dict):
            raise self.error(f"key '{key}' must be a table, got {_show(value)}")
        return Table(file=self.file, path=f"{self.path}.{key}" if self.path else key, data=value)

    def take_string(self, key: str, choices: tuple[str, ...] | None = None) -> str:
        """The string ``key``, optionally one of ``choices``.

        Raises:
            InputError: missing, not a string, or not among ``choices``.
        """
        value = self._get(key)
        if not isinstance(value, str):
            raise self.error(f"key '{key}' must be a string, got {_show(value)}")
        if choices is not None and value not in choices:
            raise self.error(f"key '{key}' must be one of {list(choices)}, got {_show(value)}")
        return value

    def take_flag(self, key: str) -> bool:
        """The boolean ``key``.

        Raises:
            InputError: missing, or not ``true`` / ``false``.
        """
        value = self._get(key)
        if not isinstance(value, bool):
            raise self.error(f"key '{key}' must be true or false, got {_show(value)}")
        return value

    def take_strings(self, key: str) -> list[str]:
        """The list of strings ``key``.

        Raises:
            InputError: missing, or not a list of strings.
        """
        value = self._get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"key '{key}' must be a list of strings, got {_show(value)}")
        return value

    def take_points(self, key: str) -> tuple[tuple[int, int], ...]:
        """The list of ``[x, y]`` pairs of non-negative integers ``key``.

        Raises:
            InputError: missing, or not a list of such pairs.
        """
        value = self._get(key)
        def point(v: Any) -> bool:
            return (isinstance(v, list | tuple) and len(v) == 2
                    and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v))
        if not isinstance(value, list | tuple) or not all(point(v) for v in value):
            raise self.error(f"key '{key}' must be a list of [x, y] pairs of integers >= 0, got {_show(value)}")
        return tuple((int(x), int(y)) for x, y in value)

    def take_triples(self, key: str) -> tuple[tuple[int, int, int], ...]:
        """The non-empty list of ``[a, b, c]`` triples of positive integers ``key``.

        Raises:
            InputError: missing, or not a non-empty list of such triples.
        """
        value = self._get(key)
        def triple(v: Any) -> bool:
            return (isinstance(v, list | tuple) and len(v) == 3
                    and all(isinstance(i, int) and not isinstance(i, bool) and i >= 1 for i in v))
        if not isinstance(value, list | tuple) or not value or not all(triple(v) for v in value):
            raise self.error(f"key '{key}' must be a list of [a, b, c] triples of integers >= 1, got {_show(value)}")
        return tuple((int(a), int(b), int(c)) for a, b, c in value)

    def take_number(
        self, key: str, *, integer: bool = False, minimum: float = 0.0, inclusive: bool = False,
        maximum: float = math.inf,
    ) -> int | float:
        """The number ``key`` as written in the file (no unit conversion).

        Args:
            key: the key.
            integer: require a TOML integer.
            minimum: lower bound; excluded unless ``inclusive``.
            inclusive: accept ``minimum`` itself.
            maximum: inclusive upper bound.

        Raises:
            InputError: missing, not a (finite) number, or out of range.
        """
        value = self._get(key)
        kind, article = ("integer", "an") if integer else ("number", "a")
        ok_type = isinstance(value, int) and not isinstance(value, bool) if integer else _is_number(value)
        if not ok_type or not math.isfinite(value):
            raise self.error(f"key '{key}' must be {article} {kind}, got {_show(value)}")
        above = value >= minimum if inclusive else value > minimum
        if not above or value > maximum:
            wanted = _range(kind, minimum, inclusive, maximum)
            raise self.error(f"key '{key}' must be {wanted}, got {_show(value)}")
        return cast(int | float, value)

    def take_quantity(self, key: str, *, integer: bool = False) -> tuple[str, float]:
        """The quantity ``key`` converted to SI, with its SI name; range follows the name.

        The value must lie in the quantity's plausible range (:data:`PLAUSIBLE`): times may be
        zero, efficiencies lie in [0.01, 1], counts in [1, 2^20]...

        Returns:
            ``(si_name, value)``, e.g. ``("hop_latency_s", 1e-9)`` for ``hop_latency_ns = 1``.

        Raises:
            InputError: missing, wrong type or out of range.
        """
        _, si_name, factor = split_unit(key)
        minimum, maximum, reason = plausible_range(si_name)
        value = self.take_number(key, integer=integer, inclusive=True, minimum=-math.inf)
        # dividing by an exact inverse keeps 5 us == 5e-06 exactly (5 * 1e-6 is not)
        si = value if integer and factor == 1.0 else float(value * factor if factor >= 1 else value / round(1 / factor))
        if not minimum <= si <= maximum:
            unit = (" " + key[len(split_unit(key)[0]) + 1:]) if key != split_unit(key)[0] else ""
            low, high = (f"{bound / factor:,.7g}" for bound in (minimum, maximum))
            raise self.error(f"key '{key}' must be in [{low}, {high}]{unit} ({reason}), got {_show(value)}")
        return si_name, si

    def take_source(self, key: str) -> str:
        """The citation ``<key>_source`` that every numeric key carries.

        Raises:
            InputError: missing or empty.
        """
        source = self.take_string(key + SOURCE_SUFFIX)
        if not source.strip():
            raise self.error(f"key '{key}{SOURCE_SUFFIX}' must cite a source, got ''")
        return source

    def finish(self, known: Sequence[str] = ()) -> None:
        """Reject every key that was not taken, each with the closest of ``known`` (the keys the
        table may hold) when one is close (``hop_latency_ms``: did you mean ``hop_latency_ns``?).

        Raises:
            InputError: naming every unknown key.
        """
        unknown = [key for key in self.data if key not in self._taken]
        if unknown:
            raise self.error("; ".join(_unknown(key, known) for key in unknown))


def _unknown(key: str, known: Sequence[str]) -> str:
    cited = key.removesuffix(SOURCE_SUFFIX)
    if cited != key and cited in known:
        return f"key '{key}' cites '{cited}', which the table does not give"
    return f"unknown key '{key}'{did_you_mean(key, known)}"


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to ``key`` (difflib's ratio >= 0.6),
    else ``""``."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def plausible_range(si_name: str) -> tuple[float, float, str]:
    """(minimum, maximum, why) of the quantity ``si_name`` (:data:`PLAUSIBLE`); times may be 0."""
    return PLAUSIBLE[next(s for s in sorted(PLAUSIBLE, key=len, reverse=True) if si_name.endswith(s))]


def _range(kind: str, minimum: float, inclusive: bool, maximum: float) -> str:
    if minimum == 0 and maximum == math.inf:
        return f"a non-negative {kind}" if inclusive else f"a positive {kind}"
    low = "[" if inclusive else "("
    return f"a {kind} in {low}{minimum:g}, {maximum:g}]"

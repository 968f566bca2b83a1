"""Metric names in a PromQL expression, by a small tokenizer (no PromQL parser in Python here).

Strings, label matchers ``{...}``, ranges ``[...]`` and label lists after ``by``/``without``/``on``/
``ignoring``/``group_left``/``group_right`` are dropped first; what is left that is an identifier, not
a keyword and not followed by ``(`` (a function or aggregation) is a metric name.
"""

from __future__ import annotations

import re

KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "offset", "atan2", "inf", "nan",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("{}", text)
    text = _RANGE.sub("[]", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names

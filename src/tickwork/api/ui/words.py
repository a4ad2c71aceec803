"""Cron expressions in words, with tickwork's day rule.

cron-descriptor writes the words. It joins a restricted day-of-month and day-of-week
with "or" unless day-of-month is exactly ``*``; tickwork (Vixie) joins them with
"and" as soon as either field starts with ``*`` (``*/10``), so those few get the
library's "only on" wording instead. A macro (``@daily``) is described by the five
fields it runs as.
"""

from __future__ import annotations

from functools import lru_cache

from cron_descriptor import ExpressionDescriptor, Options

from tickwork.core import cron


@lru_cache(maxsize=4096)
def schedule_in_words(expression: str) -> str:
    macro = expression.strip(" \t").lower()
    expression = cron.MACROS.get(macro, expression)
    fields = expression.split()
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        words: str = ExpressionDescriptor(expression, options).get_description()
    except Exception:  # words are a courtesy: the cron text is shown anyway
        return ""
    if len(fields) == 5:
        day, weekday = fields[2], fields[4]
        if (day.startswith("*") or weekday.startswith("*")) and "*" not in (day, weekday):
            words = words.replace(", or on ", ", only on ")
    return words

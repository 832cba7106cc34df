"""Subscription matching: which subscribers want a message with this routing key.

A pattern is bytes; its first characters choose how it matches:

==================  ========================================================
``re:EXPR``         Python regular expression, matched at the start of the
                    key (``re.match``; end it with ``$`` to match the whole key)
``glob:EXPR``       shell glob over the whole key (``*``, ``?``, ``[...]``)
``prefix:TEXT``     the key starts with ``TEXT`` (to prefix-match keys that
                    themselves begin with ``re:`` or ``glob:``)
anything else       the key starts with the pattern, as ZeroMQ SUB does
                    (the empty pattern matches every key)
==================  ========================================================

:class:`Filter` is one subscriber's set of patterns (a message matching any
of them matches once).  :class:`Matcher` indexes many filters: prefixes sit
in a table keyed by prefix and grouped by prefix length (a hashed trie), so
finding the subscribers of a key costs one lookup per distinct prefix
length, not one test per subscriber; regular expressions and globs are
tested one by one, and every answer is cached per key until the
subscriptions change.  Plain objects, not thread-safe: one actor owns them.
"""
import fnmatch
import re

__all__ = ["Filter", "Matcher", "PatternError", "parse"]

_REGEX = b"re:"
_GLOB = b"glob:"
_PREFIX = b"prefix:"


class PatternError(ValueError):
    """A pattern that cannot be compiled (bad regular expression)."""


def parse(pattern):
    """``(prefix, None)`` for a prefix pattern, ``(None, compiled_regex)`` for a regex or glob."""
    if pattern.startswith(_REGEX):
        try:
            return None, re.compile(pattern[len(_REGEX):], re.DOTALL)
        except (re.error, OverflowError, RecursionError) as exc:
            raise PatternError("bad regular expression %r: %s" % (pattern[3:43], exc)) from None
    if pattern.startswith(_GLOB):
        source = fnmatch.translate(pattern[len(_GLOB):].decode("latin-1"))
        return None, re.compile(source.encode("latin-1"), re.DOTALL)
    if pattern.startswith(_PREFIX):
        return pattern[len(_PREFIX):], None
    return pattern, None


class Filter:
    """One subscriber's patterns; calling it with a key says whether any matches."""

    __slots__ = ("patterns", "prefixes", "regexes", "owner")

    def __init__(self, owner=None):
        self.owner = owner
        self.patterns = []
        self.prefixes = ()
        self.regexes = ()

    def add(self, pattern):
        """Add ``pattern`` (raises :class:`PatternError`); False if it was there already."""
        if pattern in self.patterns:
            return False
        prefix, regex = parse(pattern)
        self.patterns.append(pattern)
        if regex is None:
            self.prefixes += (prefix,)
        else:
            self.regexes += (regex.match,)
        return True

    def __call__(self, key):
        if key.startswith(self.prefixes):
            return True
        for match in self.regexes:
            if match(key) is not None:
                return True
        return False

    def __len__(self):
        return len(self.patterns)


class Matcher:
    """Many filters, indexed for fast lookup by key.  See the module docstring."""

    __slots__ = ("_prefixes", "_lengths", "_regexes", "_cache", "cache_size")

    def __init__(self, cache_size=4096):
        self._prefixes = {}   # prefix -> {filter: None} (insertion-ordered set)
        self._lengths = ()    # distinct prefix lengths, ascending
        self._regexes = {}    # filter -> tuple of match functions
        self._cache = {}      # key -> tuple of owners
        self.cache_size = cache_size

    def add(self, flt):
        """Index every pattern of ``flt`` (call again after adding patterns to it)."""
        self.remove(flt)
        for prefix in flt.prefixes:
            self._prefixes.setdefault(prefix, {})[flt] = None
        if flt.regexes:
            self._regexes[flt] = flt.regexes
        self._changed()

    def remove(self, flt):
        """Forget ``flt``; True if it was indexed."""
        found = self._regexes.pop(flt, None) is not None
        for prefix in flt.prefixes:
            holders = self._prefixes.get(prefix)
            if holders is not None and holders.pop(flt, 0) is None:
                found = True
                if not holders:
                    del self._prefixes[prefix]
        if found:
            self._changed()
        return found

    def _changed(self):
        self._lengths = tuple(sorted({len(prefix) for prefix in self._prefixes}))
        self._cache.clear()

    def match(self, key):
        """The owners of every filter matching ``key``, each once, as a tuple."""
        found = self._cache.get(key)
        if found is not None:
            return found
        hits = {}
        prefixes = self._prefixes
        size = len(key)
        for length in self._lengths:
            if length > size:
                break
            holders = prefixes.get(key[:length])
            if holders:
                hits.update(holders)
        for flt, regexes in self._regexes.items():
            if flt not in hits:
                for match in regexes:
                    if match(key) is not None:
                        hits[flt] = None
                        break
        found = tuple(flt.owner for flt in hits)
        cache = self._cache
        if len(cache) >= self.cache_size:
            cache.clear()
        cache[key] = found
        return found

    def __len__(self):
        return len(set().union(*self._prefixes.values(), self._regexes))

    def __bool__(self):
        return bool(self._prefixes or self._regexes)

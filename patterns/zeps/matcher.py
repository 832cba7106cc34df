"""Subscription matching: which subscribers want a message with this routing key.

A pattern is bytes; its first characters choose how it matches:

==================  ========================================================
``re:EXPR``         RE2 regular expression, matched at the start of the key
                    (end it with ``$`` to match the whole key); bytes, ``.``
                    matches every byte.  RE2 syntax is Python's without
                    backreferences, lookaround, atomic groups, possessive
                    repeats or ``\\Z`` (write ``\\z``): patterns using them are
                    refused (:class:`PatternError`)
``glob:EXPR``       shell glob over the whole key (``*``, ``?``, ``[...]``,
                    ``[!...]``), as :func:`fnmatch.fnmatchcase`
``prefix:TEXT``     the key starts with ``TEXT`` (to prefix-match keys that
                    themselves begin with ``re:`` or ``glob:``)
anything else       the key starts with the pattern, as ZeroMQ SUB does
                    (the empty pattern matches every key)
==================  ========================================================

Regular expressions and globs run on RE2 (``google-re2``): time linear in
the key, whatever the pattern (no backtracking: ``re:(a|a)*$`` cannot hold
the loop), and many of them are matched together as one ``re2.Set``.
:func:`parse` is the one place a pattern is understood: the broker, the
dashboard's tail and the Spark key filter all go through it.

:class:`Filter` is one subscriber's set of patterns (a message matching any
of them matches once).  :class:`Matcher` indexes many filters: prefixes sit
in a table keyed by prefix and grouped by prefix length (a hashed trie), so
finding the subscribers of a key costs one lookup per distinct prefix
length, not one test per subscriber; the distinct expressions of all
filters sit in two RE2 sets (a large one rebuilt now and then, and a small
one taking the recent changes), so a key costs two set matches however many
``re:`` subscribers there are; every answer is cached per key until the
subscriptions change.  Plain objects, not thread-safe: one actor owns them.
"""
import re2

__all__ = ["Filter", "Matcher", "PatternError", "parse"]

_REGEX = b"re:"
_GLOB = b"glob:"
_PREFIX = b"prefix:"
#: RE2 memory for one expression (its program and DFA): what a subscriber may make us hold per pattern
MAX_PATTERN_MEMORY = 1 << 20
#: RE2 memory for one set of expressions (its program and DFA cache): this much, and this much more per
#: expression, up to the most; a set over budget is split in two
SET_MEMORY, SET_MEMORY_PER_PATTERN, MAX_SET_MEMORY = 8 << 20, 4 << 10, 64 << 20
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class PatternError(ValueError):
    """A pattern that cannot be compiled (bad or unsupported regular expression)."""


def _options(max_mem):
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1  # keys are bytes: one byte, one character
    options.dot_nl = True                            # '.' matches every byte, as re.DOTALL did
    options.log_errors = False                       # a peer's bad pattern is its error, not our log's
    options.max_mem = max_mem
    return options


_PATTERN_OPTIONS = _options(MAX_PATTERN_MEMORY)


def parse(pattern):
    """``(prefix, None)`` for a prefix pattern, ``(None, source)`` for a regex or glob.

    ``source`` is the RE2 expression (anchored at the key's start when
    matched), checked to compile: :class:`PatternError` says why not.
    """
    if pattern.startswith(_REGEX):
        source = pattern[len(_REGEX):]
    elif pattern.startswith(_GLOB):
        source = glob_to_re2(pattern[len(_GLOB):])
    elif pattern.startswith(_PREFIX):
        return pattern[len(_PREFIX):], None
    else:
        return pattern, None
    compile_regex(source, pattern)
    return None, source


def compile_regex(source, pattern=None):
    """``source`` compiled by RE2 (its ``match`` anchors at the start); :class:`PatternError` if refused."""
    try:
        return re2.compile(source, _PATTERN_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "refused"
        if isinstance(reason, bytes):
            reason = reason.decode("latin-1")
        shown = (pattern if pattern is not None else source)[:60].decode("utf-8", "replace")
        raise PatternError("bad regular expression '%s': %s (re: patterns use RE2 syntax: no backreferences"
                           " or lookaround)" % (shown, reason)) from None


def glob_to_re2(glob):
    """The RE2 expression matching what :func:`fnmatch.fnmatchcase` matches with the glob ``glob`` (bytes)."""
    out = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == 0x2A:                           # '*'
            if not out or out[-1] != b".*":
                out.append(b".*")
        elif c == 0x3F:                         # '?'
            out.append(b".")
        elif c == 0x5B:                         # '['
            j = i + (i < n and glob[i] == 0x21)
            j += j < n and glob[j] == 0x5D      # a ']' first is a member
            while j < n and glob[j] != 0x5D:
                j += 1
            if j >= n:                          # never closed: a literal '['
                out.append(_literal(c))
                continue
            body, i = glob[i:j], j + 1
            negate = body[:1] == b"!"
            if negate:
                body = body[1:]
            members = []
            k = 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == 0x2D:   # a range 'a-z'
                    if body[k] <= body[k + 2]:                   # fnmatch drops empty ranges
                        members.append(b"\\x{%x}-\\x{%x}" % (body[k], body[k + 2]))
                    k += 3
                else:
                    members.append(b"\\x{%x}" % body[k])
                    k += 1
            if members:
                out.append(b"[" + b"^" * negate + b"".join(members) + b"]")
            else:                               # '[!]'-like leftovers: fnmatch matches any or none
                out.append(b"." if negate else b"[^\\x00-\\x{ff}]")
        else:
            out.append(_literal(c))
    return b"".join(out) + b"\\z"


def _literal(byte):
    return bytes((byte,)) if byte in _WORD else b"\\x{%x}" % byte


class PatternSet:
    """Regex sources matched together: ``match(key)`` gives the indexes of those matching at its start.

    Compiled into one ``re2.Set`` on the first match after a change (split
    in halves if RE2 finds the set too big for its memory budget).
    """

    __slots__ = ("sources", "_sets")

    def __init__(self, sources=()):
        self.sources = list(sources)
        self._sets = None

    def add(self, source):
        self.sources.append(source)
        self._sets = None

    def match(self, key):
        sets = self._sets
        if sets is None:
            sets = self._sets = _compile_sets(self.sources, 0)
        if len(sets) == 1:
            return sets[0][1].Match(key) or ()
        found = []
        for offset, rset in sets:
            hits = rset.Match(key)
            if hits:
                found.extend(offset + i for i in hits)
        return found

    def __len__(self):
        return len(self.sources)


def _compile_sets(sources, offset):
    if not sources:
        return []
    rset = re2.Set.MatchSet(_options(min(MAX_SET_MEMORY, SET_MEMORY + SET_MEMORY_PER_PATTERN * len(sources))))
    for source in sources:
        rset.Add(source)
    try:
        rset.Compile()
    except re2.error:
        if len(sources) == 1:
            raise PatternError("regular expression '%s' is over RE2's memory budget"
                               % sources[0][:60].decode("utf-8", "replace")) from None
        half = len(sources) // 2
        return _compile_sets(sources[:half], offset) + _compile_sets(sources[half:], offset + half)
    return [(offset, rset)]


class Filter:
    """One subscriber's patterns; calling it with a key says whether any matches."""

    __slots__ = ("patterns", "prefixes", "regexes", "owner", "_set")

    def __init__(self, owner=None):
        self.owner = owner
        self.patterns = []
        self.prefixes = ()
        self.regexes = ()   # RE2 sources of its re: and glob: patterns
        self._set = None

    def add(self, pattern):
        """Add ``pattern`` (raises :class:`PatternError`); False if it was there already."""
        if pattern in self.patterns:
            return False
        prefix, source = parse(pattern)
        self.patterns.append(pattern)
        if source is None:
            self.prefixes += (prefix,)
        elif source not in self.regexes:
            self.regexes += (source,)
            self._set = None
        return True

    def __call__(self, key):
        if key.startswith(self.prefixes):
            return True
        if not self.regexes:
            return False
        if self._set is None:
            self._set = PatternSet(self.regexes)
        return bool(self._set.match(key))

    def __len__(self):
        return len(self.patterns)


class Matcher:
    """Many filters, indexed for fast lookup by key.  See the module docstring.

    ``delta``: expressions the small set takes before both are rebuilt as
    one (a change recompiles at most that many at the next match).
    """

    __slots__ = ("_prefixes", "_lengths", "_filters", "_holders", "_big", "_small", "_where", "_stale",
                 "_cache", "cache_size", "delta")

    def __init__(self, cache_size=4096, delta=128):
        self._prefixes = {}   # prefix -> {filter: None} (insertion-ordered set)
        self._lengths = ()    # distinct prefix lengths, ascending
        self._filters = {}    # filter -> its regex sources, as indexed
        self._holders = {}    # regex source -> {filter: None}: the live expressions
        self._big = PatternSet()
        self._small = PatternSet()
        self._where = {}      # regex source -> the PatternSet holding it (live or stale)
        self._stale = 0       # sources in the sets that no filter holds any more
        self._cache = {}      # key -> tuple of owners
        self.cache_size = cache_size
        self.delta = delta

    def add(self, flt):
        """Index every pattern of ``flt`` (call again after adding patterns to it)."""
        self.remove(flt, changed=False)
        for prefix in flt.prefixes:
            self._prefixes.setdefault(prefix, {})[flt] = None
        if flt.regexes:
            self._filters[flt] = flt.regexes
            holders, where = self._holders, self._where
            for source in flt.regexes:
                held = holders.get(source)
                if held is None:
                    held = holders[source] = {}
                    if source in where:         # stale in a set: alive again
                        self._stale -= 1
                    else:
                        self._small.add(source)
                        where[source] = self._small
                held[flt] = None
        self._changed()

    def remove(self, flt, changed=True):
        """Forget ``flt``; True if it was indexed."""
        sources = self._filters.pop(flt, None)
        found = sources is not None
        for source in sources or ():
            held = self._holders[source]
            del held[flt]
            if not held:
                del self._holders[source]
                self._stale += 1
        for prefix in flt.prefixes:
            holders = self._prefixes.get(prefix)
            if holders is not None and holders.pop(flt, 0) is None:
                found = True
                if not holders:
                    del self._prefixes[prefix]
        if found and changed:
            self._changed()
        return found

    def _changed(self):
        self._lengths = tuple(sorted({len(prefix) for prefix in self._prefixes}))
        self._cache.clear()
        if len(self._small) > self.delta or self._stale > max(self.delta, len(self._holders)):
            self._big = PatternSet(self._holders)   # every live expression, in one set
            self._small = PatternSet()
            self._where = dict.fromkeys(self._holders, self._big)
            self._stale = 0

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
        if self._holders:
            holders = self._holders
            for patterns in (self._big, self._small):
                if patterns.sources:
                    sources = patterns.sources
                    for i in patterns.match(key):
                        held = holders.get(sources[i])
                        if held:
                            hits.update(held)
        found = tuple(flt.owner for flt in hits)
        cache = self._cache
        if len(cache) >= self.cache_size:
            cache.clear()
        cache[key] = found
        return found

    def __len__(self):
        return len(set().union(*self._prefixes.values(), self._filters))

    def __bool__(self):
        return bool(self._prefixes or self._filters)

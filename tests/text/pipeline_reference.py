"""An independent Python reading of a Hugging Face tokenizer.json with a BPE model: normalizers,
pre-tokenizers, added tokens, BPE (byte-level or with byte fallback), decoders and the template.

Written from the documented behaviour of Hugging Face's tokenizers, not from the C++: patterns
run by Python's `regex` module (the same Unicode classes as Oniguruma), normalization forms and
categories by `unicodedata` (categories by the regex module, which knows Unicode 15), BPE as a loop that merges the lowest-ranked adjacent pair. Python's
unicodedata may know an older Unicode than the C++ (utf8proc, Unicode 15): a test feeds it only
characters the two agree on (see compare_pipelines.py).
"""
import unicodedata

import regex

from compare_tokenizer import BYTE_CHAR, CHAR_BYTE  # GPT-2's byte alphabet

WHITE_SPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B)}
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def is_ws(c):
    return c in WHITE_SPACE


def is_word(c):
    return bool(regex.match(r"\w", c))


def is_punct(c):
    return (c.isascii() and 32 < ord(c) < 127 and not c.isalnum()) or bool(regex.match(r"\p{P}", c))


def find_iter(pattern, text):
    """Matches left to right; an empty match right after the previous match is skipped."""
    pos, last_end, out = 0, None, []
    while pos <= len(text):
        m = pattern.search(text, pos)
        if not m:
            break
        s, e = m.span()
        if s == e and last_end == e:
            pos += 1
            continue
        out.append((s, e))
        pos, last_end = e, e
    return out


def ranges_of(spans, text):
    if not text:
        return [(0, 0, False)]
    out, prev = [], 0
    for s, e in spans:
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def char_spans(pred, text):
    return [(i, i + 1) for i, c in enumerate(text) if pred(c)]


def group(ranges, behavior):
    kept, prev = [], False
    if behavior == "Isolated":
        kept = [[s, e] for s, e, _ in ranges]
    elif behavior == "Removed":
        kept = [[s, e] for s, e, m in ranges if not m]
    elif behavior in ("Contiguous", "MergedWithPrevious"):
        for s, e, m in ranges:
            join = (m == prev) if behavior == "Contiguous" else (m and not prev)
            if join and kept:
                kept[-1][1] = e
            else:
                kept.append([s, e])
            prev = m
    elif behavior == "MergedWithNext":
        for s, e, m in reversed(ranges):
            if m and not prev and kept:
                kept[-1][0] = s
            else:
                kept.append([s, e])
            prev = m
        kept.reverse()
    return kept


class Tokenizer:
    def __init__(self, doc):
        self.doc = doc
        model = doc["model"]
        self.vocab = model["vocab"]
        self.inv = {i: k for k, i in self.vocab.items()}
        self.prefix = model.get("continuing_subword_prefix") or ""
        self.suffix = model.get("end_of_word_suffix") or ""
        self.ranks = {}
        for r, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks.setdefault((a, b), r)
        self.added = doc.get("added_tokens") or []
        for a in self.added:
            self.inv[a["id"]] = a["content"]

    # -- normalizers
    def normalize(self, text, n=None):
        n = self.doc.get("normalizer") if n is None else n
        if not n:
            return text
        t = n["type"]
        if t == "Sequence":
            for s in n["normalizers"]:
                text = self.normalize(text, s)
            return text
        if t in ("NFC", "NFD", "NFKC", "NFKD"):
            return unicodedata.normalize(t, text)
        if t == "Lowercase":
            return "".join(c.lower() for c in text)
        if t == "StripAccents":
            return "".join(c for c in text if not regex.match(r"\p{M}", c))
        if t == "Strip":
            if n.get("strip_left"):
                while text and is_ws(text[0]):
                    text = text[1:]
            if n.get("strip_right"):
                while text and is_ws(text[-1]):
                    text = text[:-1]
            return text
        if t == "Prepend":
            return n["prepend"] + text if text else text
        if t == "Replace":
            p = n["pattern"]
            if "String" in p:
                return text.replace(p["String"], n["content"])
            spans = find_iter(regex.compile(p["Regex"]), text)
            out, done = [], 0
            for s, e in spans:
                out += [text[done:s], n["content"]]
                done = e
            return "".join(out) + text[done:]
        raise ValueError(t)

    # -- pre-tokenizers: a list of (piece, starts_at_offset_0)
    def pre_tokenize(self, pieces, p=None):
        p = self.doc.get("pre_tokenizer") if p is None else p
        if not p:
            return pieces
        t = p["type"]
        if t == "Sequence":
            for s in p["pretokenizers"]:
                pieces = self.pre_tokenize(pieces, s)
            return pieces
        out = []
        for text, first in pieces:
            def split(ranges, behavior, text=text, first=first):
                for s, e in group(ranges, behavior):
                    if s != e:
                        out.append((text[s:e], first and s == 0))
            if t == "ByteLevel":
                if p.get("add_prefix_space", True) and not text.startswith(" "):
                    text = " " + text
                parts = [(text, first)]
                if p.get("use_regex", True):
                    parts = [(text[s:e], first and s == 0) for s, e in group(
                        ranges_of(find_iter(regex.compile(GPT2_SPLIT), text), text), "Isolated")
                        if s != e]
                out += [("".join(BYTE_CHAR[b] for b in x.encode()), f) for x, f in parts]
            elif t == "Split":
                pat = p["pattern"]
                spans = ([m.span() for m in regex.finditer(regex.escape(pat["String"]), text)]
                         if "String" in pat else find_iter(regex.compile(pat["Regex"]), text))
                ranges = ranges_of(spans, text)
                if p.get("invert"):
                    ranges = [(s, e, not m) for s, e, m in ranges]
                split(ranges, p["behavior"])
            elif t == "Digits":
                split(ranges_of(char_spans(lambda c: bool(regex.match(r"\p{N}", c)), text),
                                text), "Isolated" if p.get("individual_digits") else "Contiguous")
            elif t == "Punctuation":
                split(ranges_of(char_spans(is_punct, text), text), p.get("behavior", "Isolated"))
            elif t == "WhitespaceSplit":
                split(ranges_of(char_spans(is_ws, text), text), "Removed")
            elif t == "Whitespace":
                for m in regex.finditer(r"\w+|[^\w\s]+", text):
                    out.append((m.group(), first and m.start() == 0))
            elif t == "Metaspace":
                r = p["replacement"]
                text = text.replace(" ", r)
                scheme = p.get("prepend_scheme", "always")
                if not text.startswith(r) and (scheme == "always" or (scheme == "first" and first)):
                    text = r + text
                if p.get("split", True):
                    split(ranges_of(char_spans(lambda c: c == r, text), text), "MergedWithNext",
                          text)
                elif text:
                    out.append((text, first))
            else:
                raise ValueError(t)
        return out

    # -- the model
    def bpe(self, piece):
        model = self.doc["model"]
        if model.get("ignore_merges") and piece in self.vocab:
            return [self.vocab[piece]]
        word, unk = [], None
        unk_token = model.get("unk_token")
        for i, c in enumerate(piece):
            s = (self.prefix if i > 0 else "") + c + (self.suffix if i == len(piece) - 1 else "")
            if s in self.vocab:
                if unk is not None:
                    word.append(unk)
                    unk = None
                word.append(s)
                continue
            if model.get("byte_fallback"):
                codes = ["<0x%02X>" % b for b in s.encode()]
                if all(x in self.vocab for x in codes):
                    word += codes
                    continue
            if unk_token:
                if unk is not None and not model.get("fuse_unk"):
                    word.append(unk)
                unk = unk_token
        if unk is not None:
            word.append(unk)
        while len(word) > 1:
            ranked = [(self.ranks[(a, b)], i) for i, (a, b) in enumerate(zip(word, word[1:]))
                      if (a, b) in self.ranks]
            if not ranked:
                break
            _, i = min(ranked)
            word = word[:i] + [word[i] + word[i + 1][len(self.prefix):]] + word[i + 2:]
        return [self.vocab[w] for w in word]

    # -- added tokens
    def split_added(self, text, normalized, parse_special):
        tokens = [a for a in self.added if a.get("normalized", not a["special"]) == normalized]
        forms = {}
        for a in tokens:
            forms[a["id"]] = self.normalize(a["content"]) if normalized else a["content"]
        parts, done, at = [], 0, 0
        while at < len(text):
            best = None
            for a in tokens:
                f = forms[a["id"]]
                if f and text.startswith(f, at) and (best is None or len(f) > len(forms[best["id"]])):
                    best = a
            if best is None:
                at += 1
                continue
            start, stop = at, at + len(forms[best["id"]])
            at = stop
            if best["special"] and not parse_special:
                continue
            if best.get("single_word"):
                if (start > 0 and is_word(text[start - 1])) or (stop < len(text) and is_word(text[stop])):
                    continue
            if best.get("lstrip"):
                s = start
                while s > 0 and is_ws(text[s - 1]):
                    s -= 1
                start = max(s, done)
            if best.get("rstrip"):
                while stop < len(text) and is_ws(text[stop]):
                    stop += 1
            if done < start:
                parts.append((text[done:start], None, done))
            parts.append((text[start:stop], best["id"], start))
            done = at = stop
        if done < len(text) or not parts:
            parts.append((text[done:], None, done))
        return parts

    def encode(self, text, parse_special=False):
        ids = []
        for part, tid, off in self.split_added(text, False, parse_special):
            if tid is not None:
                ids.append(tid)
                continue
            if not part:  # an empty part is dropped before any pre-tokenizer sees it
                continue
            normalized = self.normalize(part)
            for sub, sid, soff in self.split_added(normalized, True, parse_special):
                if sid is not None:
                    ids.append(sid)
                    continue
                if not sub:
                    continue
                for piece, _ in self.pre_tokenize([(sub, off == 0 and soff == 0)]):
                    ids += self.bpe(piece)
        return ids

    def template(self):
        before, after, seen = [], [], False
        def walk(p):
            nonlocal seen
            if not p:
                return
            if p["type"] == "Sequence":
                for q in p["processors"]:
                    walk(q)
            elif p["type"] == "TemplateProcessing":
                for item in p["single"]:
                    if "Sequence" in item:
                        seen = True
                        continue
                    name = item["SpecialToken"]["id"]
                    (after if seen else before).extend(p["special_tokens"][name]["ids"])
        walk(self.doc.get("post_processor"))
        return before, after

    # -- decoders
    def decode(self, ids):
        tokens = [self.inv[i] for i in ids]
        d = self.doc.get("decoder")
        if not d:
            return " ".join(tokens)
        return "".join(self.decode_chain(tokens, d))

    def decode_chain(self, tokens, d):
        t = d["type"]
        if t == "Sequence":
            for s in d["decoders"]:
                tokens = self.decode_chain(tokens, s)
            return tokens
        if t == "ByteLevel":
            data = b"".join(bytes(CHAR_BYTE[c] for c in x) if all(c in CHAR_BYTE for c in x)
                            else x.encode() for x in tokens)
            return [data.decode("utf-8", errors="replace")]
        if t == "Fuse":
            return ["".join(tokens)]
        if t == "Replace":
            return [x.replace(d["pattern"]["String"], d["content"]) for x in tokens]
        if t == "Strip":
            out = []
            for x in tokens:
                s, e = 0, len(x)
                for i in range(min(d["start"], len(x))):
                    if x[i] != d["content"]:
                        break
                    s = i + 1
                for k in range(min(d["stop"], len(x))):
                    if x[len(x) - 1 - k] != d["content"]:
                        break
                    e = len(x) - 1 - k
                out.append(x[s:e] if e > s else "")
            return out
        if t == "Metaspace":
            r = d["replacement"]
            drop = d.get("prepend_scheme", "always") != "never"
            return [x.replace(r, "" if i == 0 and drop else " ") for i, x in enumerate(tokens)]
        if t == "ByteFallback":
            out, pending = [], b""
            def flush():
                nonlocal pending
                if pending:
                    try:
                        out.append(pending.decode("utf-8"))
                    except UnicodeDecodeError:
                        out.extend(["\ufffd"] * len(pending))
                pending = b""
            for x in tokens:
                m = regex.fullmatch(r"<0x([0-9A-F]{2})>", x)
                if m:
                    pending += bytes([int(m.group(1), 16)])
                else:
                    flush()
                    out.append(x)
            flush()
            return out
        raise ValueError(t)

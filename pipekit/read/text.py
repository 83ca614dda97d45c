"""Bytes to text: the encodings a documents folder really holds, and the files that are not text.

Every text format (Markdown, plain text, HTML, reST, CSV) starts here: `decode_text` finds
the encoding (a BOM, UTF-8, UTF-16 without a BOM, a declared charset, a detected legacy code
page) and refuses what nobody wrote to be read (`Unreadable`, whose message becomes the
`error` column of the file's row).
"""
from __future__ import annotations

import codecs
import re


class Unreadable(Exception):
    """A file we looked at and could not read; its message goes into the `error` column."""


def read_text_file(data: bytes) -> dict:
    text, encoding, note = decode_text(data)
    return {"text": text, "encoding": encoding, "note": note}


# ---- encodings

_BOMS = (  # UTF-32 first: its little-endian BOM begins with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
# C0 and C1 control characters other than the whitespace ones (tab, LF, VT, FF, CR).
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_ASCII_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0e, 0x20), 0x7f])
_C1_UTF8 = re.compile(b"\xc2[\x80-\x9f]")
# Text is text even with a stray control character (a NUL from a crashed editor);
# when more than a tenth of it is control characters, nobody wrote it to be read.
_MAX_CONTROL_SHARE = 0.10
# Legacy single-byte code pages charset-normalizer cannot tell apart on Western text:
# for "Le café était très chaud", cp1257 (Baltic) scored better than cp1252 and turned
# "très" into "trčs".  So when cp1252 (or Latin-1) is among its candidates and scores
# within _NEAR_TIE of the best, we take it: Windows-1252 is what Western users' legacy
# files are in.  The price, a real Baltic or Central European file read as cp1252, is
# paid only when that decoding is just as plausible; Cyrillic, Greek and CJK texts never
# offer cp1252 as a candidate.  Detection of 8-bit code pages on short text stays a guess,
# which is why the note says "detected": re-saving such a file as UTF-8 removes the doubt.
_PREFERRED_LEGACY = ("cp1252", "latin_1", "iso8859_15")
_NEAR_TIE = 0.06


def decode_text(data: bytes, declared: str | None = None) -> tuple[str, str, str | None]:
    """(text, encoding, note) for a text file's bytes; raises Unreadable when it is not text.

    The order is the one that cannot be fooled: a byte-order mark is a statement by the
    writer; valid UTF-8 is almost never an accident for non-ASCII text; an encoding the
    document declares (HTML's <meta charset>) comes next; only then do we guess, with
    charset-normalizer.  The recorded encoding is the Python codec that decodes the file
    as it is on disk (BOM included: `utf-8-sig`, `utf-16`, `utf-32`).
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return _checked(data.decode(codec), codec, None, data)
            except UnicodeDecodeError as exc:
                raise Unreadable(f"undecodable: starts with a {codec} byte-order mark but byte "
                                 f"{exc.start} is not valid {codec}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_at = exc.start
    else:
        return _checked(text, "utf-8", None, data, utf8=True)
    if b"\x00" in data:
        raise Unreadable(_not_text(data))
    mostly = _mostly_utf8(data)
    if mostly is not None:
        text, bad = mostly
        return _checked(text, "utf-8", f"{bad} invalid UTF-8 sequence{'s' if bad > 1 else ''} "
                        f"(first at byte {bad_at}) replaced by U+FFFD", data)
    if declared:
        try:
            return _checked(data.decode(declared), codecs.lookup(declared).name,
                            f"not UTF-8; decoded as the declared charset {declared}", data)
        except (LookupError, UnicodeDecodeError):
            pass
    codec = _detect(data)
    try:
        text = data.decode(codec) if codec else None
    except UnicodeDecodeError:  # charset-normalizer judges samples; the whole file may disagree
        text = None
    if text is None:
        raise Unreadable(f"undecodable: not UTF-8 (invalid byte at offset {bad_at}) and no "
                         "other encoding fits")
    return _checked(text, codec, f"not UTF-8; encoding {codec} detected by charset-normalizer", data)


_NON_ASCII = re.compile("[^\x00-\x7f]")


def _mostly_utf8(data: bytes) -> tuple[str, int] | None:
    """(text, number of bad sequences) when the bytes are UTF-8 with a few bad ones.

    A UTF-8 file with one stray Windows-1252 byte pasted in, or cut off in the middle of
    a character, is still a UTF-8 file: handing it to the detector instead would decode
    every one of its good accented letters as mojibake.  The test: valid multi-byte
    sequences outnumber the invalid ones ten to one (a real cp1252 file forms valid
    UTF-8 sequences only by accident, so it has next to none).
    """
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    good = len(_NON_ASCII.findall(text)) - bad
    return (text, bad) if good >= 10 * bad else None


def _checked(text: str, encoding: str, note: str | None, data: bytes,
             utf8: bool = False) -> tuple[str, str, str | None]:
    if utf8:
        # `text` is `data` decoded whole as UTF-8, so its control characters can be counted in
        # the bytes, in C: an ASCII one is its own byte (never inside a multi-byte sequence),
        # a C1 one is \xc2 and a byte \x80-\x9f.  Counting them in the text with a regex
        # was 0.25 s of the Python manual's 6 s.
        controls = len(data) - len(data.translate(None, _ASCII_CONTROL_BYTES)) + len(_C1_UTF8.findall(data))
    else:
        controls = len(_CONTROL.findall(text))
    if controls and controls > _MAX_CONTROL_SHARE * len(text):
        raise Unreadable(_not_text(data))
    if "\x00" in text:
        nuls = text.count("\x00")
        extra = f"contains {nuls} NUL character{'s' if nuls > 1 else ''} (removed by stage 02)"
        note = f"{note}; {extra}" if note else extra
    return text, encoding, note


def _not_text(data: bytes) -> str:
    """Why bytes are not text, in words: binary (and what kind, when its first bytes say
    so), or UTF-16 text that lost its byte-order mark, which a re-save fixes."""
    if _looks_utf16(data[:4096]):
        return ("not readable as text: it looks like UTF-16 without a byte-order mark "
                "(every other byte is NUL): re-save it with one, or as UTF-8")
    kind = next((name for magic, name in _MAGIC if data.startswith(magic)), None)
    why = "NUL bytes" if b"\x00" in data else "mostly control characters"
    return f"binary file ({kind + ': ' if kind else ''}{why}), not text"


# The first bytes of the binary files most often found renamed or mislabelled in a
# documents folder: naming the kind tells the user what they copied by mistake.
_MAGIC = (
    (b"\x7fELF", "an ELF executable or library"), (b"MZ", "a Windows executable or DLL"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"), (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
    (b"PK\x03\x04", "a ZIP archive (also .docx, .xlsx, .jar)"), (b"\x1f\x8b", "gzip-compressed data"),
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"SQLite format 3\x00", "an SQLite database"), (b"\xd0\xcf\x11\xe0", "an old Microsoft Office file"),
)


def _looks_utf16(sample: bytes) -> bool:
    """True when the bytes read as UTF-16 text (either byte order), not merely hold many NULs.

    The old test, "most bytes of one parity are NUL", called /bin/ls UTF-16: an executable
    is full of zero runs, so both parities are mostly NUL.  Text in UTF-16 has NUL in one
    parity only (the high byte of Latin letters), never in the other, and decodes without
    U+0000 and with next to no control characters."""
    sample = sample[: len(sample) // 2 * 2]
    if len(sample) < 8:
        return False
    for high, codec in ((sample[1::2], "utf-16-le"), (sample[0::2], "utf-16-be")):
        low = sample[0::2] if codec == "utf-16-le" else sample[1::2]
        if high.count(0) < 0.5 * len(high) or low.count(0) > 0.02 * len(low):
            continue
        try:
            text = sample.decode(codec)
        except UnicodeDecodeError:  # a lone surrogate at the cut is not evidence
            text = sample[:-2].decode(codec, errors="replace")
        if "\x00" not in text and len(_CONTROL.findall(text)) <= 0.02 * len(text):
            return True
    return False


def _detect(data: bytes) -> str | None:
    from charset_normalizer import from_bytes  # imported late: it is slow to import

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    for codec in _PREFERRED_LEGACY:
        for match in matches:
            if match.encoding == codec and match.chaos <= best.chaos + _NEAR_TIE:
                return codec
    return best.encoding

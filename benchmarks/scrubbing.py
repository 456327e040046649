"""Scrubbing: pathological inputs at 100k and 200k characters (issue 19.1: every rule linear in its input, the
worst case printed), the secret classifier's precision and recall on the labelled corpus of
``tests/memory/scrubbing`` (issue 20), and scrubber throughput on the mixed corpus of ``benchmarks.plane2``.

No database: the scrubber and the classifier are pure functions. ``PATHOLOGICAL`` is shared with the
regression tests (``tests/memory/scrubbing/test_linear.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

SIZES = (100_000, 200_000)


def repeat(unit: str, tail: str = "") -> Callable[[int], str]:
    """``unit`` repeated to ``n`` characters (then ``tail``, which ends many a match attempt in failure)."""

    def make(n: int) -> str:
        body = unit * (n // len(unit) + 1)
        return body[: n - len(tail)] + tail

    return make


def _distinct_keys(n: int) -> str:
    return "".join(f"&token{i}=x" for i in range(n // 8))[:n]


# Family -> generator of a text of n characters. Each family repeats what one rule starts from (an opener, a
# key word, a separator, a token prefix) with nothing that would let the match succeed and move on.
PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    # repeated openers
    "pem opener": repeat("-----BEGIN "),
    "pem opener, full header": repeat("-----BEGIN PRIVATE KEY-----\n"),
    "pem end": repeat("-----END "),
    # separators
    "'=' run": repeat("="),
    "':' run": repeat(":"),
    "': ' run": repeat(": "),
    "';' run": repeat(";"),
    "'-' run": repeat("-"),
    "'.' run": repeat("."),
    # assignments
    "a= repeated": repeat("a="),
    "key: repeated": repeat("key: "),
    "key= repeated": repeat("key="),
    "token= repeated": repeat("token="),
    "password: repeated": repeat("password: "),
    "key word run then =": repeat("key", "=x"),
    "key word run then :": repeat("key", ": x"),
    "secret word run": repeat("secret"),
    "passw run": repeat("passw"),
    "token={token= nesting": repeat("token=token{"),
    "cookie items": repeat("Cookie: a=1;"),
    "yaml block keys": repeat("password: |\n"),
    "bracketed values": repeat("key=["),
    "quoted escapes": repeat("password='\\"),
    "passphrase then spaces": lambda n: "passphrase: a" + " " * (n - 14) + "b",
    "Authorization: repeated": repeat("Authorization: "),
    "Bearer repeated": repeat("Bearer "),
    # @ runs
    "'@' run": repeat("@"),
    "a@ repeated": repeat("a@"),
    "a. run then @": repeat("a.", "@b.co"),
    "a@b. repeated": repeat("a@b."),
    "addresses": repeat("x@y.co "),
    # digits and dashes
    "digit run": repeat("1"),
    "1- repeated": repeat("1-"),
    "12 groups then x": repeat("12 ", "x"),
    "12 34 pairs": repeat("12 34 ", "a"),
    "phone-shaped 555-1234": repeat("555-1234 "),
    "Visa-like groups": repeat("4111 "),
    "SSN-like in one token": repeat("123-45-6789/"),
    "+1 repeated": repeat("+1 "),
    "( then digits": lambda n: "(" * (n - 9) + "555 1234x",
    # JWT-like dots
    "eyJ. repeated": repeat("eyJ."),
    "eyJ run": repeat("eyJ"),
    "eyJa.b repeated": repeat("eyJa.b"),
    "discord-like dots": repeat("MTAxMjM0NTY3ODkwMTIzNDU2Nzg5."),
    # JSON keys
    'JSON "key": "': repeat('"key": "'),
    'JSON {"token": ': repeat('{"token": '),
    'JSON "a": 1,': repeat('"a": 1, '),
    # URL parameters
    "?a=&a= repeated": repeat("?a=&a="),
    "&token= repeated": repeat("&token="),
    "distinct sensitive keys": _distinct_keys,
    "'?' run": repeat("?"),
    "'#' run then =": repeat("#a", "="),
    "://a: repeated": repeat("://a:"),
    "://a:b@ repeated": repeat("://a:b@"),
    # whitespace runs
    "spaces": repeat(" "),
    "spaces between words": lambda n: "a" + " " * (n - 2) + "b",
    "tabs": repeat("\t"),
    "newlines": repeat("\n"),
    "mixed whitespace": repeat(" \t\n\r"),
    # token prefixes and shapes
    "sk- repeated": repeat("sk-"),
    "AKIA repeated": repeat("AKIA"),
    "khm_ repeated": repeat("khm_"),
    "glpat- repeated": repeat("glpat-"),
    "AccountKey= repeated": repeat("AccountKey="),
    "bot id then :AA": repeat("1:AA"),
    "{{ repeated": repeat("{{"),
    "markers": repeat("<redacted>"),
    "one long word": repeat("a"),
    "hyphenated word run": repeat("aaaaaaaaaaaaaaaaaaaaaaaaaaaaa-"),
    "hex run after token": lambda n: "token " + ("0123456789abcdef" * (n // 16 + 1))[: n - 6],
    "prose about a password": repeat("my password is "),
}


def time_once(func: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    func(text)
    return time.perf_counter() - start


def pathological(results, *, sizes: tuple[int, ...] = SIZES) -> None:
    from memory.scrubbing import looks_like_secret, scrub

    scrub("warm up: key=abc123 -----BEGIN PRIVATE KEY----- a@b.co 555-123-4567")
    worst = {"scrub": (0.0, "", 0), "classifier": (0.0, "", 0)}
    for name, make in PATHOLOGICAL.items():
        row = []
        for n in sizes:
            text = make(n)
            for label, func in (("scrub", scrub), ("classifier", looks_like_secret)):
                seconds = time_once(func, text)
                row.append(f"{label} {1000 * seconds:7.1f} ms @{n // 1000}k")
                if seconds > worst[label][0]:
                    worst[label] = (seconds, name, n)
        print(f"  {name:<32} " + "  ".join(row), flush=True)
    for label, (seconds, name, n) in worst.items():
        results.add(
            f"scrubbing.pathological_worst_{label}",
            1000 * seconds,
            "ms",
            f"worst of {len(PATHOLOGICAL)} pathological families at {n:,} chars: {name}",
        )


def classifier_quality(results) -> None:
    """Precision and recall of ``looks_like_secret`` on the labelled corpus (``tests/memory/scrubbing``)."""
    from memory.scrubbing import looks_like_secret
    from tests.memory.scrubbing.corpus import CLASSIFIER_LABELLED

    tp = fp = fn = tn = 0
    for text, is_secret in CLASSIFIER_LABELLED:
        flagged = looks_like_secret(text)
        tp += flagged and is_secret
        fp += flagged and not is_secret
        fn += (not flagged) and is_secret
        tn += (not flagged) and not is_secret
    size = f"{tp + fn} secrets, {fp + tn} benign texts (tests/memory/scrubbing corpus)"
    results.add("scrubbing.classifier_precision", tp / max(1, tp + fp), "ratio", size)
    results.add("scrubbing.classifier_recall", tp / max(1, tp + fn), "ratio", size)
    results.add("scrubbing.classifier_false_positives", fp, "texts", size)
    results.add("scrubbing.classifier_false_negatives", fn, "texts", size)


def throughput(results, *, megabytes: float = 5) -> None:
    from benchmarks.plane2 import corpus
    from memory.scrubbing import scrub

    text = corpus(megabytes)
    scrub(text[:100_000], redact_pii=True)  # warm the compiled patterns
    size = len(text.encode())
    wall, cpu = [], []
    for _ in range(5):  # one call is a single sample on a noisy machine: report medians of five
        start, start_cpu = time.perf_counter(), time.process_time()
        scrub(text, redact_pii=True)
        wall.append(size / (time.perf_counter() - start) / 1e6)
        cpu.append(size / max(time.process_time() - start_cpu, 1e-9) / 1e6)
    label = f"{size / 1e6:.1f} MB mixed corpus (benchmarks.plane2), median of 5 calls"
    results.add("scrubbing.scrubber_throughput", sorted(wall)[2], "MB/s", label + ", wall clock")
    # The scrubber's own cost on one core: what another process took of this core does not count against it.
    results.add("scrubbing.scrubber_throughput_cpu", sorted(cpu)[2], "MB/s", label + ", CPU time of this process")


def run(results, *, scale: int = 1) -> None:
    print("scrubbing: pathological inputs…", flush=True)
    pathological(results, sizes=SIZES if scale == 1 else tuple(n // scale for n in SIZES))
    classifier_quality(results)
    throughput(results, megabytes=5 / scale)


if __name__ == "__main__":  # python -m benchmarks.scrubbing: no database needed
    import os
    import sys

    sys.path.insert(0, os.getcwd())
    from benchmarks.harness import Results

    run(Results(), scale=int(sys.argv[1]) if len(sys.argv) > 1 else 1)

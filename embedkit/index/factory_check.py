"""FAISS factory strings checked before FAISS sees them (and before any encoding).

FAISS parses ``index_factory`` strings with regexes and trusts the numbers in them: ``HNSW0`` aborts on a C++
assertion, ``HNSW1``, ``RR0`` and ``RQ0x8`` segfault, ``PQ4x0`` dies of SIGFPE, ``NSG8`` can loop forever in its tree
growing, and an ``IDMap`` prefix builds an index that refuses ``add``. None of these raise a ``RuntimeError`` that
Python could catch, so the string is parsed here with FAISS's own grammar, restricted to the components whose
parameters can be checked, and refused with one line naming the flag. Only what the parse cannot tell (a
combination FAISS's grammar rejects, a dimension a transform leaves behind) is left to a tiny throw-away index of
the same string, built in this process once the parse has ruled out every parameter that crashes natively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from embedkit.errors import EmbedkitError

MAX_LENGTH = 256
MAX_NLIST = 1 << 20  # IVF lists: FAISS suggests up to 2**20 cells for a billion vectors
MAX_GRAPH_DEGREE = 512  # HNSW M and NSG R: memory grows with n * degree
MIN_HNSW_M = 2  # FAISS: M=0 aborts on an assertion, M=1 segfaults while adding
MIN_NSG_R = 16  # FAISS's NSG tree growing can loop forever when R is small (seen up to R=10 on 20,000 vectors)
NSG_MIN_VECTORS = 101  # FAISS's NNDescent refuses graphs of 100 nodes or fewer
MAX_DIM_OUT = 65536
MAX_PQ_BITS = 16  # FAISS refuses > 24; 2**16 centroids per sub-quantizer is already impractical
SQ_TYPES = ("SQ4", "SQ6", "SQ8", "SQfp16", "SQbf16", "SQ8_direct_signed", "SQ8_direct")
SUPPORTED = (
    "Flat, SQ4/SQ6/SQ8/SQfp16/SQbf16, PQm[xb][np], PQmx4fs, LSHn[r][t], HNSWm[,Flat|PQ|SQ], NSGr[,Flat|PQ|SQ], "
    "IVFn[_HNSWm|_NSGr],Flat|FlatDedup|SQ|PQ, IMI2xb,..., transforms PCA[W][R]n, OPQm[_d], RR[n], ITQ[n], L2norm, "
    "Padn, refinement ,RFlat or ,Refine(...); binary BFlat, BIVFn[_HNSWm], BHNSWm, BHash[n x]b"
)


@dataclass
class _Parse:
    """What the parse of one string learned: the flag to name, the metric and the training count it must suit."""

    factory: str
    field: str
    metric: str
    count: int | None

    def refuse(self, why: str) -> EmbedkitError:
        return EmbedkitError(f"factory string '{self.factory}' refused: {why}", field=self.field)

    def whole(self, text: str, name: str, low: int, high: int) -> int:
        """A decimal parameter of a component, within ``[low, high]`` (no int overflow reaches FAISS's stoi)."""
        if len(text) > 9 or not low <= int(text) <= high:
            raise self.refuse(f"{name} must be between {low} and {high}, not {text}")
        return int(text)

    def trains(self, clusters: int, what: str) -> None:
        """k-means needs at least as many training vectors as clusters (FAISS raises only after the encoding)."""
        if self.count is not None and clusters > self.count:
            raise self.refuse(f"{what} needs at least {clusters} training vectors, there are {self.count}")


def check_factory(
    factory: object,
    dim: int | None = None,
    *,
    metric: str = "ip",
    count: int | None = None,
    field: str = "factory",
    build: bool = True,
) -> str:
    """``factory`` when FAISS can build it for ``dim``-dimensional vectors (``None``: not known yet) under ``metric``
    trained on ``count`` vectors (``None``: not known yet); else one ``EmbedkitError`` naming ``field``.

    Call it before encoding: with ``dim=None`` it checks what the string alone can tell, with ``dim`` it also builds
    a tiny empty index of the string in this process, which FAISS refuses with a catchable error (``build=False``
    leaves that to the caller, which builds the index next).
    """
    if not isinstance(factory, str):
        raise EmbedkitError(f"must be a string, not {type(factory).__name__}", field=field)
    parse = _Parse(factory, field, metric, count)
    if not factory or len(factory) > MAX_LENGTH or not re.fullmatch(r"[A-Za-z0-9_,()+]+", factory):
        raise parse.refuse(f"a factory string is 1 to {MAX_LENGTH} of the characters A-Z a-z 0-9 _ , ( ) +")
    if "IDMap" in factory:
        raise parse.refuse("embedkit maps rows to document ids itself; drop the IDMap/IDMap2 part")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise EmbedkitError(f"the vectors' dimension must be a whole number >= 1, not {dim!r}", field="dim")
    if factory.startswith("B"):
        _binary(parse, factory, dim)
    else:
        _float(parse, factory, dim)
    if dim is not None and build:
        _tiny_build(parse, dim)
    return factory


def _binary(parse: _Parse, text: str, dim: int | None) -> None:
    """FAISS reads binary strings with ``sscanf`` (``BIVF-5x`` passes as ``BIVF-5``), so match them whole here."""
    if dim is not None and dim % 8:
        raise parse.refuse(f"a binary index needs a dimension that is a multiple of 8, the vectors have {dim}")
    if text == "BFlat":
        return
    if match := re.fullmatch(r"BIVF([0-9]+)(?:_HNSW([0-9]+))?", text):
        nlist = parse.whole(match[1], "the number of IVF lists", 1, MAX_NLIST)
        parse.trains(nlist, f"IVF{nlist}")
        if match[2] is not None:
            parse.whole(match[2], "HNSW's M", MIN_HNSW_M, MAX_GRAPH_DEGREE)
        return
    if match := re.fullmatch(r"BHNSW([0-9]+)", text):
        parse.whole(match[1], "HNSW's M", MIN_HNSW_M, MAX_GRAPH_DEGREE)
        return
    if match := re.fullmatch(r"BHash(?:([0-9]+)x)?([0-9]+)", text):
        tables = 1 if match[1] is None else parse.whole(match[1], "the number of hash tables", 1, 64)
        bits = parse.whole(match[2], "the hash bits", 1, 64)
        if dim is not None and tables * bits > dim:
            raise parse.refuse(f"{tables} hash tables of {bits} bits need {tables * bits} bits, the vectors have {dim}")
        return
    raise parse.refuse(f"not a binary factory embedkit can check (supported: {SUPPORTED})")


def _float(parse: _Parse, text: str, dim: int | None, refining: bool = False) -> None:
    """FAISS's driver: refinement suffixes, then pre-transforms (which change the dimension), then one index;
    ``refining``: ``text`` is the index inside ``Refine(...)``, which FAISS reads vectors back from one by one."""
    if match := re.fullmatch(r"(.+),RFlat", text):
        return _float(parse, match[1], dim, refining)
    if match := re.fullmatch(r"(.+),Refine\((.+)\)", text):
        _float(parse, match[1], dim, refining)
        return _float(parse, match[2], dim, refining=True)
    while (match := re.fullmatch(r"([^,]+),(.*)", text)) and (changed := _transform(parse, match[1], dim)):
        dim, text = changed[1], match[2]
    if "(" in text or ")" in text:
        raise parse.refuse(f"'{text}': only ',Refine(...)' may hold a sub-index in parentheses")
    if _basic(parse, text, dim):
        return
    if match := re.fullmatch(r"(HNSW|NSG)([0-9]*)(?:[,_](.*))?", text):
        graph = match[1]
        if graph == "HNSW":
            parse.whole(match[2] or "32", "HNSW's M", MIN_HNSW_M, MAX_GRAPH_DEGREE)
        else:
            parse.whole(match[2] or "32", "NSG's R", MIN_NSG_R, MAX_GRAPH_DEGREE)
            if parse.count is not None and parse.count < NSG_MIN_VECTORS:
                raise parse.refuse(f"NSG builds its graph from at least {NSG_MIN_VECTORS} vectors, not {parse.count}")
        code = match[3] or ""
        if code not in ("", "Flat") and not _quantizer(parse, code, dim):
            raise parse.refuse(f"'{code}' is not a storage of {graph} (Flat, PQm[xb][np], {'/'.join(SQ_TYPES)})")
        return
    coarse, _, code = text.partition(",")
    if code and _coarse(parse, coarse):
        if refining:  # FAISS aborts the process: an inverted file reads a vector back only with a direct map
            raise parse.refuse(f"'{text}' cannot refine: use Flat, SQ..., PQ... or HNSW inside Refine(...)")
        if code in ("Flat", "FlatDedup") or _quantizer(parse, code, dim) or _fast_scan(parse, code, dim, "r?"):
            return
        raise parse.refuse(f"'{code}' is not an IVF code embedkit can check (Flat, FlatDedup, SQ..., PQ...)")
    raise parse.refuse(f"'{text}' is not a FAISS component embedkit can check (supported: {SUPPORTED})")


def _transform(parse: _Parse, text: str, dim: int | None) -> tuple[str, int | None] | None:
    """A pre-transform and the dimension it outputs (``None`` where unknown), or ``None`` if ``text`` is none."""
    if match := re.fullmatch(r"PCA(W?)(R?)([0-9]+)", text):
        out = parse.whole(match[3], "PCA's output dimension", 1, dim or MAX_DIM_OUT)
        return text, out
    if match := re.fullmatch(r"OPQ([0-9]+)(?:_([0-9]+))?", text):
        m = parse.whole(match[1], "OPQ's number of sub-quantizers", 1, MAX_DIM_OUT)
        out = dim if match[2] is None else parse.whole(match[2], "OPQ's output dimension", 1, MAX_DIM_OUT)
        if out is not None and out % m:
            raise parse.refuse(f"OPQ{m} needs an output dimension that {m} divides, not {out}")
        return text, out
    if match := re.fullmatch(r"RR([0-9]+)?", text):
        out = dim if match[1] is None else parse.whole(match[1], "RR's output dimension", 1, MAX_DIM_OUT)
        return text, out
    if match := re.fullmatch(r"ITQ([0-9]+)?", text):
        out = dim if match[1] is None else parse.whole(match[1], "ITQ's output dimension", 1, dim or MAX_DIM_OUT)
        return text, out
    if re.fullmatch(r"L2[nN]orm", text):
        return text, dim
    if match := re.fullmatch(r"Pad([0-9]+)", text):
        out = parse.whole(match[1], "Pad's dimension", 1, MAX_DIM_OUT)
        return text, None if dim is None else max(out, dim)
    return None


def _basic(parse: _Parse, text: str, dim: int | None) -> bool:
    """A whole index of one component: Flat, SQ, PQ, PQ fast-scan or LSH."""
    if text == "Flat" or _quantizer(parse, text, dim) or _fast_scan(parse, text, dim, ""):
        return True
    if match := re.fullmatch(r"LSH([0-9]*)(r?)(t?)", text):
        if parse.metric != "l2":
            raise parse.refuse("FAISS's LSH index searches by L2 only (--metric l2)")
        if match[1]:
            parse.whole(match[1], "LSH's bits", 1, dim or MAX_DIM_OUT)
        return True
    return False


def _quantizer(parse: _Parse, text: str, dim: int | None) -> bool:
    """SQ or ``PQm[xb][np]`` storage, its parameters checked; ``False`` where ``text`` is neither."""
    if text in SQ_TYPES:
        return True
    match = re.fullmatch(r"PQ([0-9]+)(?:x([0-9]+))?(np)?", text)
    if not match:
        return False
    _pq(parse, match[1], dim)
    bits = 8 if match[2] is None else parse.whole(match[2], "PQ's bits per code", 1, MAX_PQ_BITS)
    parse.trains(1 << bits, f"PQ with {bits}-bit codes")
    return True


def _fast_scan(parse: _Parse, text: str, dim: int | None, residual: str) -> bool:
    """``PQmx4fs[_bbs]`` (``r`` after ``fs`` for IVF): 4-bit codes scanned in blocks of a multiple of 32."""
    match = re.fullmatch(rf"PQ([0-9]+)x4fs{residual}(?:_([0-9]+))?", text)
    if not match:
        return False
    _pq(parse, match[1], dim)
    if match[2] is not None and parse.whole(match[2], "the fast-scan block size", 32, 4096) % 32:
        raise parse.refuse(f"the fast-scan block size must be a multiple of 32, not {match[2]}")
    parse.trains(16, "PQ with 4-bit codes")
    return True


def _pq(parse: _Parse, text: str, dim: int | None) -> None:
    m = parse.whole(text, "PQ's number of sub-quantizers", 1, MAX_DIM_OUT)
    if dim is not None and dim % m:
        raise parse.refuse(f"PQ{m} splits vectors into {m} parts, which the dimension {dim} does not divide")


def _coarse(parse: _Parse, text: str) -> bool:
    """An IVF coarse quantizer (``IVFn[kM]``, ``IVFn_HNSWm``, ``IVFn_NSGr``, ``IMI2xb``); ``False`` if none."""
    if match := re.fullmatch(r"IMI2x([0-9]+)", text):
        if parse.metric != "l2":
            raise parse.refuse("FAISS's multi-index (IMI) searches by L2 only (--metric l2)")
        bits = parse.whole(match[1], "IMI's bits", 1, 12)
        parse.trains(1 << bits, f"IMI2x{bits}")
        return True
    match = re.fullmatch(r"IVF([0-9]+)([kM]?)(?:_(HNSW|NSG)([0-9]*))?", text)
    if not match:
        return False
    scale = {"": 1, "k": 1024, "M": 1024 * 1024}[match[2]]
    nlist = parse.whole(match[1], "the number of IVF lists", 1, MAX_NLIST // scale) * scale
    parse.trains(nlist, f"IVF{nlist}")
    if match[3] == "HNSW":
        parse.whole(match[4] or "32", "HNSW's M", MIN_HNSW_M, MAX_GRAPH_DEGREE)
    elif match[3] == "NSG":
        parse.whole(match[4] or "0", "NSG's R", MIN_NSG_R, MAX_GRAPH_DEGREE)
        if nlist < NSG_MIN_VECTORS:
            raise parse.refuse(f"an NSG quantizer builds its graph from at least {NSG_MIN_VECTORS} lists, not {nlist}")
    return True


def _tiny_build(parse: _Parse, dim: int) -> None:
    """An empty index of the string, built and dropped: FAISS's own refusal (a ``RuntimeError``), as one line."""
    import faiss

    metric = faiss.METRIC_L2 if parse.metric == "l2" else faiss.METRIC_INNER_PRODUCT
    try:
        if parse.factory.startswith("B"):
            faiss.index_binary_factory(dim, parse.factory)
        else:
            faiss.index_factory(dim, parse.factory, metric)
    except RuntimeError as err:
        reason = str(err).strip().splitlines()[-1].rsplit(": ", 1)[-1]
        raise EmbedkitError(
            f"FAISS cannot build factory string '{parse.factory}' for {dim}-dimensional vectors: {reason}",
            field=parse.field,
        ) from None

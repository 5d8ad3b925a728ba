"""The ranking kernel, built from _ranked.c (see scheduling/ranking.py)."""

from scheduling.model import FloatArray, IntArray

SOURCE_DIGEST: str

def rank(
    scores: FloatArray, rows: IntArray, parts: tuple[FloatArray, ...], count: int
) -> tuple[list[int], bytes]: ...
def text(
    providers: tuple[str, ...], weighers: str, numbers: bytes, multipliers: bytes
) -> str | None: ...

"""``einsum``: Einstein summation, lowered to the tensor ops autodiff and every
backend already have.

The subscripts are parsed (``"bij,bjk->bik"``, ``"...ij,...jk"``, ``"ii->i"``; an
implicit output lists the letters used once, sorted, after the ``...`` dims), and
then: a letter repeated within an operand takes its ``diagonal``; a letter only one
operand has and the output lacks is summed out there; operands are contracted left
to right, each pair as one batched ``matmul`` (``[batch, left, k] @ [batch, k,
right]`` after a ``permute``/``reshape``); the result is permuted to the output order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.shape import numel

_ELLIPSIS = "."


def _parse(equation: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """Each operand's subscripts and the output's, with ``...`` expanded into private
    symbols (right-aligned across operands, as broadcasting)."""
    equation = equation.replace(" ", "")
    if "->" in equation:
        lhs, rhs = equation.split("->", 1)
        if "->" in rhs:
            raise ValueRangeError(f"ember: einsum: {equation!r} has more than one '->'")
    else:
        lhs, rhs = equation, None
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueRangeError(f"ember: einsum: {equation!r} names {len(terms)} operands, got {len(ranks)}")
    for term in terms + ([rhs] if rhs is not None else []):
        body = term.replace("...", "")
        if _ELLIPSIS in body or not all(c.isalpha() for c in body):
            raise ValueRangeError(f"ember: einsum: subscripts must be letters and '...', got {term!r} in {equation!r}")
    n_ellipsis = 0
    for term, rank in zip(terms, ranks):
        named = len(term.replace("...", ""))
        if "..." in term:
            if named > rank:
                raise ShapeError(f"ember: einsum: {term!r} names {named} dims of a rank-{rank} operand")
            n_ellipsis = max(n_ellipsis, rank - named)
        elif named != rank:
            raise ShapeError(f"ember: einsum: {term!r} names {named} dims, but the operand has rank {rank}")
    symbols = [chr(0x3B1 + i) for i in range(n_ellipsis)]  # Greek letters stand for the ... dims
    parsed = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            head, tail = term.split("...")
            count = rank - len(head) - len(tail)
            parsed.append(list(head) + symbols[n_ellipsis - count :] + list(tail))
        else:
            parsed.append(list(term))
    if rhs is None:
        counts: dict[str, int] = {}
        for letters in parsed:
            for c in letters:
                counts[c] = counts.get(c, 0) + 1
        output = symbols + sorted(c for c, k in counts.items() if k == 1 and c not in symbols)
    else:
        if rhs.count("...") > 1:
            raise ValueRangeError(f"ember: einsum: the output {rhs!r} has more than one '...'")
        head, _, tail = rhs.partition("...")
        output = list(head) + (symbols if "..." in rhs else []) + list(tail)
    if len(set(output)) != len(output):
        raise ValueRangeError(f"ember: einsum: the output subscripts of {equation!r} repeat a letter")
    known = {c for term in parsed for c in term}
    missing = [c for c in output if c not in known]
    if missing:
        raise ValueRangeError(f"ember: einsum: the output letters {missing} of {equation!r} name no input dim")
    return parsed, output


def _take_diagonals(t: Any, letters: list[str]) -> tuple[Any, list[str]]:
    """``t`` with each repeated letter reduced to its diagonal (moved last)."""
    while len(set(letters)) != len(letters):
        for i, c in enumerate(letters):
            j = letters.index(c, i + 1) if letters.count(c) > 1 else -1
            if j >= 0:
                if t._primitive.shape[i] != t._primitive.shape[j]:
                    raise ShapeError(
                        f"ember: einsum: the repeated letter {c!r} spans dims of sizes {t._primitive.shape[i]} and {t._primitive.shape[j]}"
                    )
                t = t.diagonal(0, i, j)
                letters = [x for k, x in enumerate(letters) if k not in (i, j)] + [c]
                break
    return t, letters


def _contract(a: Any, la: list[str], b: Any, lb: list[str], keep: set[str]) -> tuple[Any, list[str]]:
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    size = {c: n for c, n in zip(la, a._primitive.shape)} | {c: n for c, n in zip(lb, b._primitive.shape)}
    a = a.permute([la.index(c) for c in batch + left + summed])
    b = b.permute([lb.index(c) for c in batch + summed + right])
    nb, nl, ns, nr = (numel(size[c] for c in group) for group in (batch, left, summed, right))
    out = a.reshape((nb, nl, ns)).matmul(b.reshape((nb, ns, nr)))
    return out.reshape(tuple(size[c] for c in batch + left + right)), batch + left + right


def einsum(equation: str, *operands: Any) -> Any:
    """Einstein summation over ``operands`` as ``equation`` says (``torch.einsum``).

    >>> from ember import Tensor
    >>> a = Tensor.from_floats([[1.0, 2.0], [3.0, 4.0]])
    >>> b = Tensor.from_floats([[1.0, 0.0], [0.0, 2.0]])
    >>> einsum("ij,jk->ik", a, b).tolist()  # a @ b
    [[1.0, 4.0], [3.0, 8.0]]
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise DTypeError(f"ember: einsum: the equation must be a str, got {type(equation).__name__}")
    if not operands:
        raise ValueRangeError("ember: einsum: needs at least one operand")
    for i, t in enumerate(operands):
        if not hasattr(t, "_primitive"):
            raise DTypeError(f"ember: einsum: operand {i} is a {type(t).__name__}, not a Tensor")
    terms, output = _parse(equation, [len(t._primitive.shape) for t in operands])
    tensors, letters = [], []
    for t, term in zip(operands, terms):
        t, term = _take_diagonals(t, list(term))
        tensors.append(t)
        letters.append(term)
    # Sizes agree, or are 1 and broadcast.
    size: dict[str, int] = {}
    for t, term in zip(tensors, letters):
        for c, n in zip(term, t._primitive.shape):
            if size.get(c, 1) == 1:
                size[c] = n
            elif n not in (1, size[c]):
                raise ShapeError(f"ember: einsum: letter {c!r} spans dims of sizes {size[c]} and {n} in {equation!r}")
    tensors = [
        t.expand(tuple(size[c] for c in term)) if tuple(size[c] for c in term) != t._primitive.shape else t
        for t, term in zip(tensors, letters)
    ]
    # Sum out letters only one operand holds and the output lacks.
    for i, term in enumerate(letters):
        others = {c for j, other in enumerate(letters) if j != i for c in other} | set(output)
        lonely = [d for d, c in enumerate(term) if c not in others]
        if lonely:
            tensors[i] = tensors[i].sum_dims(lonely).squeeze_dims(lonely)
            letters[i] = [c for d, c in enumerate(term) if d not in lonely]
    result, result_letters = tensors[0], letters[0]
    for k in range(1, len(tensors)):
        keep = set(output) | {c for term in letters[k + 1 :] for c in term}
        result, result_letters = _contract(result, result_letters, tensors[k], letters[k], keep)
    extra = [d for d, c in enumerate(result_letters) if c not in output]
    if extra:
        result = result.sum_dims(extra).squeeze_dims(extra)
        result_letters = [c for d, c in enumerate(result_letters) if d not in extra]
    return result.permute([result_letters.index(c) for c in output]) if result_letters != output else result

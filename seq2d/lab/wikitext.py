"""WikiText-2 for word-level language models, as the classic PyTorch ``word_language_model``
example reads it.

The data root holds ``wikitext-2/{train,valid,test}.txt`` (tokenised, ``<unk>`` already
applied, one sentence or heading per line). The root comes from an explicit argument (the
experiments' ``--data-root``), else the ``SEQ2D_DATA`` environment variable; nothing is
downloaded. Every line becomes its words followed by one ``<eos>``; the vocabulary is built
from the training split (WikiText-2: 33,278 words, and the validation and test splits hold
no other word).

    corpus = Corpus()                       # $SEQ2D_DATA/wikitext-2
    train = batchify(corpus.train, 20)      # (N // 20, 20): column b is one contiguous stream
    x, y = get_batch(train, 0, 35)          # (35, 20) inputs and next-word targets

``limit_tokens`` keeps the first tokens of the training split (quick runs); the vocabulary is
then that slice's, and validation/test words outside it become ``<unk>``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from ..errors import InvalidIndex, InvalidValue, MissingFile

__all__ = ["ENV_VAR", "EOS", "UNK", "Corpus", "Dictionary", "batchify", "get_batch", "wikitext_root"]

ENV_VAR = "SEQ2D_DATA"
EOS = "<eos>"
UNK = "<unk>"
SPLITS = ("train", "valid", "test")


class Dictionary:
    """Word <-> index, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)

    def __contains__(self, word: str) -> bool:
        return word in self.word2idx


def wikitext_root(root: str | os.PathLike | None = None, name: str = "wikitext-2") -> Path:
    """The folder holding ``train.txt``/``valid.txt``/``test.txt``: ``root/<name>`` (or
    ``root`` itself when it holds the files), with ``root`` from the argument, else
    ``$SEQ2D_DATA``. Raises FileNotFoundError saying where it looked and how to fix it."""
    if root is not None and str(root) != "":
        base, origin = Path(root).expanduser(), "the data root"
    elif os.environ.get(ENV_VAR):
        base, origin = Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    else:
        raise MissingFile(
            f"no data root for {name}: pass one (--data-root ROOT, or Corpus(root)) or set {ENV_VAR} to a folder "
            f"holding {name}/train.txt, valid.txt and test.txt"
        )
    for cand in (base / name, base):
        if all((cand / f"{s}.txt").is_file() for s in SPLITS):
            return cand
    missing = [f"{s}.txt" for s in SPLITS if not (base / name / f"{s}.txt").is_file()]
    raise MissingFile(
        f"{name} not found under {origin} {str(base)!r}: expected {str(base / name)}/{{train,valid,test}}.txt "
        f"(missing: {', '.join(missing)}). Point --data-root or {ENV_VAR} at the folder that contains {name}/"
    )


def _read_tokens(path: Path, limit: int | None) -> list[str]:
    words: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            words.extend(line.split())
            words.append(EOS)
            if limit is not None and len(words) >= limit:
                break
    return words if limit is None else words[:limit]


def _check_limit(name: str, v) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 2:
        raise InvalidValue(f"{name} must be an int >= 2 (tokens) or None, got {v!r}")
    return v


class Corpus:
    """The three splits as 1-D ``int64`` token tensors (``train``, ``valid``, ``test``) and
    their ``dictionary``.

    Args:
        root: data root (see :func:`wikitext_root`); default ``$SEQ2D_DATA``.
        limit_tokens: keep only the first tokens of ``train`` (the vocabulary is then built
            from that slice; other words in valid/test map to ``<unk>``).
        limit_eval_tokens: keep only the first tokens of ``valid`` and ``test``.
        name: the data set's folder under the root.
        order: ``"appearance"`` (default; ids in order of first appearance in ``train``, as the
            classic example numbers them) or ``"frequency"`` (id 0 the most frequent training
            word, ties by first appearance: the order an adaptive softmax needs).
    """

    def __init__(self, root: str | os.PathLike | None = None, *, limit_tokens: int | None = None,
                 limit_eval_tokens: int | None = None, name: str = "wikitext-2", order: str = "appearance") -> None:
        if order not in ("appearance", "frequency"):
            raise InvalidValue(f"Corpus: order must be 'appearance' or 'frequency', got {order!r}")
        self.order = order
        self.limit_tokens = _check_limit("limit_tokens", limit_tokens)
        self.limit_eval_tokens = _check_limit("limit_eval_tokens", limit_eval_tokens)
        self.path = wikitext_root(root, name)
        self.dictionary = Dictionary()
        train = _read_tokens(self.path / "train.txt", self.limit_tokens)
        for w in train:
            self.dictionary.add_word(w)
        self.train = self._ids(train)
        self.valid = self._ids(_read_tokens(self.path / "valid.txt", self.limit_eval_tokens))
        self.test = self._ids(_read_tokens(self.path / "test.txt", self.limit_eval_tokens))
        if order == "frequency":
            self._by_frequency()

    def _by_frequency(self) -> None:
        counts = torch.bincount(self.train, minlength=len(self.dictionary))
        # a stable sort on -count keeps first-appearance order among equal counts
        new_to_old = torch.sort(-counts, stable=True).indices
        old_to_new = torch.empty_like(new_to_old)
        old_to_new[new_to_old] = torch.arange(new_to_old.numel())
        d = self.dictionary
        d.idx2word = [d.idx2word[int(i)] for i in new_to_old]
        d.word2idx = {w: i for i, w in enumerate(d.idx2word)}
        self.train, self.valid, self.test = old_to_new[self.train], old_to_new[self.valid], old_to_new[self.test]

    def _ids(self, words: list[str]) -> Tensor:
        d = self.dictionary.word2idx
        if any(w not in d for w in words):
            self.dictionary.add_word(UNK)  # only a sliced vocabulary needs it (WikiText's own has <unk>)
        unk = d.get(UNK)
        return torch.tensor([d.get(w, unk) for w in words], dtype=torch.int64)

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __repr__(self) -> str:
        return (f"Corpus({str(self.path)!r}, vocab={self.vocab_size:,}, train={self.train.numel():,}, "
                f"valid={self.valid.numel():,}, test={self.test.numel():,} tokens)")


def batchify(data: Tensor, bsz: int) -> Tensor:
    """``(N,)`` tokens -> ``(N // bsz, bsz)``: column ``b`` is the ``b``-th contiguous stretch
    (the remainder is dropped), as in the classic example."""
    if isinstance(bsz, bool) or not isinstance(bsz, int) or bsz <= 0:
        raise InvalidValue(f"bsz must be a positive int, got {bsz!r}")
    if data.dim() != 1:
        raise InvalidValue(f"batchify expects a 1-D token tensor, got shape {tuple(data.shape)}")
    n = data.numel() // bsz
    if n < 2:
        raise InvalidValue(f"{data.numel()} tokens are too few for batch size {bsz} (need at least {2 * bsz})")
    return data[: n * bsz].view(bsz, n).t().contiguous()


def get_batch(source: Tensor, i: int, bptt: int) -> tuple[Tensor, Tensor]:
    """Rows ``i .. i + T`` of a batchified source and their next-word targets, both ``(T, B)``
    with ``T = min(bptt, len(source) - 1 - i)``."""
    seq_len = min(bptt, source.shape[0] - 1 - i)
    if seq_len <= 0:
        raise InvalidIndex(f"get_batch: row {i} leaves no targets in a source of {source.shape[0]} rows")
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len]

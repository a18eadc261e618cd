r"""Word-level language models for the stable-RNN experiments (Miller & Hardt, arXiv 1805.10369).

:class:`RNNLM` is the classic PyTorch ``word_language_model``: embedding -> dropout ->
recurrent layers -> dropout -> decoder (``nn.Linear``, or an adaptive softmax with
``adaptive_cutoffs``). With ``cell="tanh"`` the recurrent part is a Sequential2D RNN
(:func:`seq2d.rnn`, called like ``nn.RNN``) whose inter-layer dropout is a module block; with
``cell="lstm"`` it is ``nn.LSTM(dropout=p)``. It runs recurrently (:meth:`RNNLM.features`) or
as its k-truncated feed-forward version with its own parameters
(:meth:`RNNLM.window_features`, trainable); :meth:`RNNLM.truncated` copies the weights into a
:class:`TruncatedLM` (the tanh RNN as an acyclic Sequential2D).

Layout: :mod:`~seq2d.lab.lm.model` (the models), :mod:`~seq2d.lab.lm.evaluate` (perplexity, gradient
norm vs distance, data lambda, :func:`~seq2d.lab.lm.divergence`), :mod:`~seq2d.lab.lm.train` (the classic training loop, recurrent
or truncated, with a patience rule and resume from a :class:`~seq2d.lab.lm.LoopCheckpoint`, which
:class:`seq2d.lab.lm.checkpoint.LMCheckpoint` keeps in a file; weight distances).
"""

from .evaluate import (VANISH_FRACTION, divergence, evaluate, evaluate_truncated, grad_norm_carried,
                       grad_norm_vs_distance, grad_norm_windows, lm_data_lambda, perplexity, vanishing_distance)
from .model import CELLS, RNNLM, TruncatedLM, clip_embedding_, output_nll, output_scores
from .train import LoopCheckpoint, migrate_result, recurrent_weights, train_lm, weight_distance

__all__ = ["CELLS", "VANISH_FRACTION", "LoopCheckpoint", "RNNLM", "TruncatedLM", "clip_embedding_", "divergence", "evaluate",
           "evaluate_truncated", "grad_norm_carried", "grad_norm_vs_distance", "grad_norm_windows", "lm_data_lambda", "migrate_result",
           "output_nll", "output_scores", "perplexity", "recurrent_weights", "train_lm", "vanishing_distance", "weight_distance"]

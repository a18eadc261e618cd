r"""Stability of torch's ``nn.LSTM``, for the stable-RNN experiment (``experiments/stable_rnn/``).

``nn.LSTM`` is not a Sequential2D (its gates multiply slots), so none of this works through the
library's own stability code (:mod:`seq2d.stability`, for Sequential2D models): it reads the torch
weights directly. Derivations: ``docs/stability.md``, "LSTM stability".

- :mod:`~seq2d.lab.lstm.certificate`: the certified l-infinity contraction constant of an
  ``nn.LSTM`` (:func:`lstm_contraction_bound`, :func:`lstm_certificate`) and the search for its
  actual one (:func:`lstm_contraction_sup`); one layer's state map (:func:`lstm_state_map`).
- :mod:`~seq2d.lab.lstm.jacobian`: the exact state Jacobian of an ``nn.LSTM`` step along data
  (:func:`lstm_data_lambda`, a :class:`seq2d.stability.DataLambda` as
  :func:`seq2d.stability.data_lambda` gives for a Sequential2D).
- :mod:`~seq2d.lab.lstm.projection`: stable LSTMs in training (:class:`LSTMProjection`,
  our variant; :class:`AuthorLSTMNormalization`, the author's as described;
  :func:`make_lstm_stabilizer`; :func:`clip_embedding_`).
"""

from __future__ import annotations

from .certificate import GATES, lstm_certificate, lstm_contraction_bound, lstm_contraction_sup, lstm_state_map
from .jacobian import lstm_data_lambda, lstm_step_jacobian
from .projection import (AUTHOR_FORGET_INPUT_SCALE, LSTM_STABILIZERS, PAPER_GATE_BOUNDS, AuthorLSTMNormalization,
                         LSTMProjection, clip_embedding_, make_lstm_stabilizer)

__all__ = [
    "GATES",
    "lstm_certificate",
    "lstm_contraction_bound",
    "lstm_contraction_sup",
    "lstm_state_map",
    "lstm_data_lambda",
    "lstm_step_jacobian",
    "PAPER_GATE_BOUNDS",
    "AUTHOR_FORGET_INPUT_SCALE",
    "LSTM_STABILIZERS",
    "LSTMProjection",
    "AuthorLSTMNormalization",
    "make_lstm_stabilizer",
    "clip_embedding_",
]

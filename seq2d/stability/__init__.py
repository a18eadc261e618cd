r"""Stability of a Sequential2D's recurrent cores: certified and data-dependent contraction
constants, projections that enforce stability during training, and the truncation bound.

Reference: J. Miller and M. Hardt, "Stable Recurrent Models" (ICLR 2019; arXiv 1805.10369,
first circulated as "When Recurrent Models Don't Need To Be Recurrent"). A state map
``h_t = phi(h_{t-1}, x_t)`` is *lambda-stable* when it is a contraction in ``h``::

    ||phi(h, x) - phi(h', x)|| <= lambda ||h - h'||,   lambda < 1.

For the Elman RNN ``h_t = rho(W h_{t-1} + U x_t + b)`` with an elementwise ``rho`` whose
Lipschitz constant is ``L_rho`` this holds with ``lambda = L_rho ||W||_2`` (the paper's
sufficient condition ``||W|| < 1 / L_rho``).

What this package computes, for any Sequential2D (or a wrapper with ``.core``, such as
:class:`seq2d.RNN`), per *recurrent core* (a strongly connected component of the block
graph with a cycle, :func:`seq2d.graph.recurrent_cores`):

=========================  ===========================================================
:func:`certified_lambda`   ``lambda <= L_act * ||W_rec||_2``: a bound that holds for every
                           input (``W_rec`` = the core's block matrix, ``L_act`` = the largest
                           Lipschitz constant of the core's slot activations).
:func:`data_lambda`        the largest spectral norm of the state Jacobian
                           ``d state_t / d state_{t-1}`` (restricted to the core) along real
                           trajectories: what the model does on *this* data. Always <= the
                           certified number; our own per-step measure (the source's
                           criterion for "effectively stable" is Fig. 2 of the slides: the
                           gradient w.r.t. inputs vanishing with distance, see
                           ``seq2d.lab.lm.grad_norm_carried``), so the two answer different
                           questions, and both are reported.
:func:`rnn_constants`      Lemma 1's constants of one RNN layer (``lam``, ``lipschitz_x``,
                           ``f0``, ``state_bound``), the keyword arguments of
                           :func:`lemma1_bound`.
:class:`SpectralClip`      the projection ``W <- U diag(min(s, lambda / L_act)) V^T`` of the
                           core's matrix after each optimizer step (a trainer callback).
:func:`lemma1_bound`,      the truncation bound (Lemma 1): how far ``h_t`` of the RNN is from
:func:`truncation_length`  ``h_t^k`` of its k-truncation (:func:`seq2d.truncated_rnn`), and
                           the ``k`` that makes that at most ``eps``.
=========================  ===========================================================

Spectral norms are computed in float64 by an SVD up to ``exact_below`` rows/columns; beyond
that the *certified* number is a rigorous cap and :func:`spectral_norm` an estimate (details
in :mod:`seq2d.stability.spectral`). Each core's report says which one it used
(``norm_method``).

Layout (one job per module; each imports only the ones above it):

- :mod:`~seq2d.stability.spectral`: spectral norms (:func:`spectral_norm`,
  :func:`spectral_norm_bound`) and a core's block matrix (:func:`recurrent_matrix`).
- :mod:`~seq2d.stability.result`: what :func:`data_lambda` returns (:class:`DataLambda`: a dict
  with a short repr, the per-step tensors kept).
- :mod:`~seq2d.stability.contraction`: contraction constants (:func:`certified_lambda`,
  :func:`data_lambda`, :func:`rnn_constants`).
- :mod:`~seq2d.stability.projection`: projections onto the stable set
  (:func:`project_spectral_`, :class:`SpectralClip` with its trainer hook ``on_update_end``).
- :mod:`~seq2d.stability.truncation`: Lemma 1 bounds (:func:`lemma1_bound`,
  :func:`truncation_length`, :func:`stacked_lemma1_bound`, :func:`stacked_truncation_length`).

An ``nn.LSTM`` is not a Sequential2D: its certificate, state Jacobian and projections serve the
stable-RNN experiment and live with it, in ``seq2d.lab.lstm``.
"""

from __future__ import annotations

from .contraction import certified_lambda, data_lambda, rnn_constants
from .result import CoreLambda, DataLambda
from .projection import SpectralClip, project_spectral_
from .spectral import recurrent_matrix, spectral_norm, spectral_norm_bound
from .truncation import lemma1_bound, stacked_lemma1_bound, stacked_truncation_length, truncation_length

__all__ = [
    "spectral_norm",
    "spectral_norm_bound",
    "recurrent_matrix",
    "certified_lambda",
    "data_lambda",
    "DataLambda",
    "CoreLambda",
    "SpectralClip",
    "project_spectral_",
    "lemma1_bound",
    "truncation_length",
    "rnn_constants",
    "stacked_lemma1_bound",
    "stacked_truncation_length",
]

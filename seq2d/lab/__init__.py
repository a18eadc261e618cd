r"""The experiments' machinery: what ``experiments/`` and ``seq2d mnist`` run on top of the library.

The library (everything in ``seq2d/`` outside this package) never imports ``seq2d.lab``; the one
exception is the command line's front, ``seq2d mnist`` (:mod:`seq2d.cli`), which imports it when
that command runs. A new experiment's script goes in ``experiments/<name>/``; machinery that several
scripts (or a CLI command) reuse goes here; what any user of Sequential2D needs (models, stores,
kernels, training, stability of Sequential2D models) belongs to the library (docs/concepts.md,
"Where things live").

- :mod:`~seq2d.lab.mnist_comparison`: the MNIST sparsity comparison (``seq2d mnist``,
  ``experiments/mnist_sparsity``, ``experiments/param_budget``): its models, protocols, runs,
  table, statistics and pages; :mod:`~seq2d.lab.mnist_plots`, its figures.
- :mod:`~seq2d.lab.launch`: where the runs execute: local worker processes (``--jobs``) or SLURM
  (submitit), behind one launcher seam.
- :mod:`~seq2d.lab.wikitext`: the WikiText-2 corpus, batchified token streams.
- :mod:`~seq2d.lab.lm`: the word-level language models of the stable-RNN experiment, their
  evaluation and their training loop.
- :mod:`~seq2d.lab.lstm`: ``nn.LSTM`` stability (certificate, state Jacobian, projections).

Importing ``seq2d.lab`` imports none of these (each is imported by name).
"""

"""Recurrent layers: ``Lstm``, ``Gru`` and ``Rnn`` (PyTorch's ``nn.LSTM``, ``nn.GRU``,
``nn.RNN``: stacked, bidirectional, with per-sequence ``lengths``), Burn's ``BiLstm``, their
one-step cells, and the loops over fused weights (:mod:`ember.nn.rnn.functional`; one
direction over a whole sequence: :mod:`ember.nn.rnn.direction`)."""

from ember.nn.rnn.cells import GruCell, LstmCell, LstmState, RecurrentCell, RnnCell
from ember.nn.rnn.direction import gru_direction, lstm_direction, rnn_direction
from ember.nn.rnn.functional import gru_scan, lstm_scan, rnn_scan
from ember.nn.rnn.gate_controller import GateController
from ember.nn.rnn.gru import Gru, GruConfig
from ember.nn.rnn.lstm import BiLstm, BiLstmConfig, Lstm, LstmConfig
from ember.nn.rnn.rnn import Rnn, RnnConfig
from ember.nn.rnn.stack import RecurrentStack

__all__ = [
    "BiLstm",
    "BiLstmConfig",
    "GateController",
    "Gru",
    "GruCell",
    "GruConfig",
    "Lstm",
    "LstmCell",
    "LstmConfig",
    "LstmState",
    "RecurrentCell",
    "RecurrentStack",
    "Rnn",
    "RnnCell",
    "RnnConfig",
    "gru_direction",
    "gru_scan",
    "lstm_direction",
    "lstm_scan",
    "rnn_direction",
    "rnn_scan",
]

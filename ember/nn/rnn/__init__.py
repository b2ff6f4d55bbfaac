"""Recurrent layers."""

from ember.nn.rnn.gate_controller import GateController
from ember.nn.rnn.gru import Gru, GruConfig
from ember.nn.rnn.lstm import Lstm, LstmConfig, LstmState

__all__ = ["GateController", "Gru", "GruConfig", "Lstm", "LstmConfig", "LstmState"]

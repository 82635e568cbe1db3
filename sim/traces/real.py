"""The real nnabla models whose recorded traces and measured runs ship with the project: their
names and one line each (recorded by :mod:`sim.nnabla_studies.real_traces`)."""

MODELS = ("digits_mlp", "digits_conv_bn", "sequence_lstm")
MODEL_NOTES = {
    "digits_mlp": "real: MLP 64-64-10 on sklearn's 8x8 digits, Momentum, cpu:half",
    "digits_conv_bn": "real: 2 conv + BatchNorm on sklearn's 8x8 digits, Momentum, cpu:half",
    "sequence_lstm": "real: LSTM counting ones in 0/1 sequences, Adam, cpu:half",
}
"""One line per model, for tables."""

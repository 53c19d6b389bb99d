"""Pure judging: no engine, no I/O but reading run records.

targets       every target and threshold a validation is judged by
stats         resampling, the one interval type, the normal quantile
model_errors  a model run's errors against its reference, per transfer and per request
calibration   the fit of what a tier's links deliver to a KV transfer
decision      every verdict as one enum, and the rules that reach it
words         the sentences that explain a verdict
claims        the paper's claims (gains over RR and CLA*) on both engines, with intervals
sequential    plan a validation, then stop when it is conclusive
trajectory    how far the flow model's own draws spread on one seed's requests
divergence    how much of the engines' gap is scheduling divergence
validity      where the replica stands for the modelled cluster, and where it cannot
arrival       the flow model's error by a transfer's arrival order on its path
ladder        whether a verdict has stopped moving with the replica's scale
"""

"""comparison.json: the document a validation writes, and the sections computed into it.

document    the typed model, checked when written and when read (schema version)
sections    per-transfer, per-request and per-claim sections from two engines' run folders
verdicts    faithful runs, TTFT verdicts, rankings and claims read from run folders
summary     the acceptance figures against their targets, and the closing lines
beside      TCP-model terms judged beside the verdict's model
selection   which flow-model terms are on by default, chosen on held-out rows
"""

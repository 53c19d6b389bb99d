"""Every target and threshold a validation is judged by, in one place (pure constants).

The per-transfer and TTFT targets are the project's acceptance figures; the tolerances
are where a verdict's band lies. What each means: docs/validation.md, "Targets"."""

TRANSFER_MEDIAN = 0.05  # median |error| per whole transfer, replay, above the validity floor
TRANSFER_P90 = 0.15  # p90 of the same
ENGINES_MEDIAN = 0.10  # median |error| per whole transfer, both engines deciding
TTFT_ERROR = 0.05  # |mean-TTFT error| a scheduler must stay within ...
TTFT_CI = 0.10  # ... with both ends of its interval inside this
MIN_REQUESTS = 20  # below this a mean-TTFT comparison is inconclusive: n too small
GAIN_TOLERANCE = 0.05  # |flow gain - packets' gain| within which the engines agree
VALIDITY_TOLERANCE = 0.05  # a replica artifact that reaches this share of a transfer's time
START_TOLERANCE = 0.05  # of a transfer's time: starts that count as offered alike

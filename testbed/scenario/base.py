"""What every scenario section shares: strict fields, the bounds one machine can hold,
the error that names the file and field."""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

GB = 1e9


class ScenarioError(ValueError):
    """An invalid scenario; the message names the file and field."""


# Upper bounds are what one machine can hold: past them a run would hang or exhaust memory
# long before it said anything (a fabric of 10^4 pods, a million-cell sweep).
MAX_GPUS = 65536  # 8x the largest fabric measured (8192 GPUs: 1 GB, 34-59 s per minute)
MAX_CELLS = 10000  # sweep points; each is validated and run
DAY_S = 86400.0
MIN_PERIOD_S = 1e-3  # periodic events (refresh, change, cycle) at most 1000 per second
Latency = Annotated[float, Field(ge=0, le=1e6)]  # microseconds per tier


class _Strict(BaseModel):
    """No unknown fields, no NaN or infinity, no true/false where a number belongs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, value, info: ValidationInfo):
        if isinstance(value, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value


def _numeric(annotation) -> bool:
    args = get_args(annotation) or (annotation,)
    return bool not in args and any(a in (int, float) for a in args)

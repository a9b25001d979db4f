"""Closed forms and bounds from the seed papers, as tested functions (pure numpy, no models).

One module per family; each docstring names its paper, theorem and equation and says where the
seed's statement is corrected or refuted (``docs/theory.md`` lists them all):

- :mod:`.single`: tokens per step, speedup, optimal draft length, exact acceptance profile (seed 002)
- :mod:`.coupling`: maximal acceptance, sub-maximal accounting (seed 000, section 3)
- :mod:`.temperature`: the temperature law and its constant (seed 000, section 4)
- :mod:`.blocks`: block bounds and the Theorem 5.1 / 5.3 counterexamples (seed 000, section 5)
- :mod:`.multidraft`: K-SEQ, alpha*, SpecTr-GBV's claimed bound (Sun et al. 2023; seeds 001, 004)
- :mod:`.sprinter`: SPRINTER's law, run length, stopping time, acceptance (seed 003)
- :mod:`.global_resolution`: Global Resolution's error bounds (seed 001)
- :mod:`.tuning`: tokens per target call of a decoding, predicted from target-sampled paths (``tune``)

Block statements take *conditional tables*: ``tables[i]`` of shape ``[V] * (i + 1)`` holds the
conditional of block token i + 1 given the block's first i tokens.
"""

from .blocks import (
    FullAcceptanceBound,
    LongestPrefixClaim,
    MarkovBlockBound,
    full_acceptance_bound,
    longest_prefix_claim,
    markov_block_bound,
    markov_sensitivity,
)
from .coupling import RejectionAccounting, SubmaximalStep, maximal_acceptance, rejection_accounting, submaximal_step
from .global_resolution import MultiStepError, ResolutionBounds, global_resolution_bounds, multi_step_error
from .multidraft import (
    KSEQ_GUARANTEE,
    MultiDraftAcceptance,
    kseq_acceptance,
    kseq_beta,
    kseq_position_law,
    kseq_rho,
    multidraft_acceptance,
    selection_position_law,
    spectr_gbv_claimed_bound,
)
from .single import (
    AcceptanceProfile,
    OptimalDraftLength,
    acceptance_profile,
    optimal_draft_length,
    speedup,
    tokens_per_step,
)
from .sprinter import (
    RunLength,
    sprinter_acceptance,
    sprinter_output_law,
    sprinter_run_length,
    sprinter_stopping_time,
    sprinter_tv,
)
from .temperature import (
    TemperatureLaw,
    TemperatureSchedule,
    log_mad,
    schedule_rejections,
    temperature_constant,
    temperature_law,
    tempered,
)
from .tuning import (
    StepCosts,
    TokensPerCall,
    expected_calls,
    gbv_expected_accepted,
    path_survival,
    plug_in_survival,
    fit_overhead,
    least_squares_line,
    predicted_tokens_per_second,
    tokens_per_call,
)

__all__ = [
    "AcceptanceProfile",
    "FullAcceptanceBound",
    "KSEQ_GUARANTEE",
    "LongestPrefixClaim",
    "MarkovBlockBound",
    "MultiDraftAcceptance",
    "MultiStepError",
    "OptimalDraftLength",
    "RejectionAccounting",
    "ResolutionBounds",
    "RunLength",
    "StepCosts",
    "SubmaximalStep",
    "TemperatureLaw",
    "TemperatureSchedule",
    "TokensPerCall",
    "acceptance_profile",
    "expected_calls",
    "fit_overhead",
    "full_acceptance_bound",
    "gbv_expected_accepted",
    "global_resolution_bounds",
    "kseq_acceptance",
    "kseq_beta",
    "kseq_position_law",
    "kseq_rho",
    "least_squares_line",
    "log_mad",
    "longest_prefix_claim",
    "markov_block_bound",
    "markov_sensitivity",
    "maximal_acceptance",
    "multi_step_error",
    "multidraft_acceptance",
    "selection_position_law",
    "optimal_draft_length",
    "path_survival",
    "plug_in_survival",
    "predicted_tokens_per_second",
    "rejection_accounting",
    "schedule_rejections",
    "speedup",
    "sprinter_acceptance",
    "sprinter_output_law",
    "sprinter_run_length",
    "sprinter_stopping_time",
    "sprinter_tv",
    "spectr_gbv_claimed_bound",
    "submaximal_step",
    "temperature_constant",
    "temperature_law",
    "tempered",
    "tokens_per_call",
    "tokens_per_step",
]

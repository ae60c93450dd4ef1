/** The evaluation's defaults (light: the CLI's help reads them without loading the evaluator). */

/** Scored tokens of an evaluation unless `--eval-tokens` says otherwise. */
export const DEFAULT_EVAL_TOKENS = 16384;
/** Window length on held-out text (capped at the model's context): each window is BOS + 511 tokens of text. */
export const EVAL_WINDOW = 512;
/**
 * Length of each self-generated sequence (models without a tokenizer): the reorder pass's default
 * calibration length, so `--eval-tokens 630` is exactly its held-out draw (10 × 63 scored tokens).
 */
export const SELF_GENERATED_LENGTH = 64;
/** Seed of self-generated held-out sequences (the reorder pass's default calibration seed). */
export const EVAL_SEED = 42;

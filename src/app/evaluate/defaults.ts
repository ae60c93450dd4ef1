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
/**
 * The seed the evaluation's self-generated held-out set is drawn from: EVAL_SEED in a domain of its
 * own. The passes draw calibration with their seed s (42 by default), acceptance sets with
 * heldOutSeed(s) and training data with trainingSeed(s); drawn from heldOutSeed(42), the evaluation
 * set began with every pass's acceptance sequences, and the compile reported on what a pass had
 * selected on. test/eval-disjoint.test.ts checks that no default draw meets it.
 */
export const EVAL_DRAW_SEED = (EVAL_SEED ^ 0x3c6ef372) >>> 0;

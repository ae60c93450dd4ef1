/**
 * One spelling of each weight format, accepted by every target, in any case. Each target's table
 * keeps the spelling its own ecosystem uses (GGUF's `F16`, ONNX's `fp16`) and that its manifest
 * records; a user may write any name of the same format: `--target cuda --quant F16` is cuda's fp16,
 * `q4_k_m` is gguf's Q4_K_M. Only names of the same encoding are aliases: int8 is not Q8_0.
 */

/** Names of one format, the canonical (README, llmc list formats) first. */
export const FORMAT_ALIASES: readonly (readonly string[])[] = [
  ['F32', 'FP32', 'float32'],
  ['F16', 'FP16', 'float16', 'half'],
  ['BF16', 'bfloat16'],
];

const key = (s: string) => s.trim().toUpperCase();

/** The names `value` may stand for (itself and its aliases), upper case. */
function namesOf(value: string): string[] {
  const v = key(value);
  const group = FORMAT_ALIASES.find((g) => g.some((n) => key(n) === v));
  return group ? group.map(key) : [v];
}

/** `value` as `table` spells it (case-insensitive, aliases included), or null when the table has no such format. */
export function formatIn(table: readonly string[], value: string): string | null {
  const names = namesOf(value);
  return table.find((f) => names.includes(key(f))) ?? null;
}

/** Options of the reorder pass (`--opt reorder.key=value`, or the --importance / --levels flags). */
import { UsageError } from '../../src/core/errors.js';
import { PROVIDERS, type ProviderName } from './importance.js';

export interface ReorderOptions {
  importance: ProviderName | 'auto';
  /** Calibration sequences × tokens (default the paper's 10 × 64) and seed (the paper's 42). */
  calibCount: number;
  calibLength: number;
  /** A text file to calibrate on (needs the model's tokenizer); absent = self-generated. */
  calibText: string | null;
  seed: number;
  /** Held-out sequences for `auto` and per-level perplexity. */
  heldOut: number;
  /** Number of anchor layers, or an explicit list. Default round(L·6/32) (ELMS: 6 of 32). */
  anchors: number | number[] | 'default';
  /** Explicit level fractions, or a count. Default 10. */
  levels: number[] | { count: number };
  /** Alignment override; default from the target's quantization block. */
  quantBlock: number | null;
  /** Measure held-out perplexity at each level (default: models up to 50M parameters). */
  evaluate: boolean | 'auto';
  /** Level fractions measure all parameters (`total`, default) or decoder-layer parameters (`blocks`, as ELMS's table). */
  sizeBy: 'total' | 'blocks';
}

export const OPTION_KEYS = ['importance', 'calib', 'calibLength', 'calibText', 'seed', 'heldOut', 'anchors', 'levels', 'quantBlock', 'evaluate', 'sizeBy'] as const;

const int = (key: string, v: string, min: number) => {
  if (!/^\d+$/.test(v.trim()) || Number(v) < min) throw new UsageError(`reorder.${key} must be an integer ≥ ${min}, got "${v}"`);
  return Number(v);
};

export function parseReorderOptions(raw: Record<string, string>): ReorderOptions {
  for (const k of Object.keys(raw)) {
    if (!(OPTION_KEYS as readonly string[]).includes(k)) throw new UsageError(`unknown reorder option "${k}"; known: ${OPTION_KEYS.join(', ')}`);
  }
  const importance = (raw.importance ?? 'taylor').trim();
  if (importance !== 'auto' && !(PROVIDERS as readonly string[]).includes(importance)) {
    throw new UsageError(`reorder.importance must be one of ${[...PROVIDERS, 'auto'].join(', ')}, got "${importance}"`);
  }
  let levels: ReorderOptions['levels'] = { count: 10 };
  if (raw.levels !== undefined) {
    const v = raw.levels.trim();
    if (/^\d+$/.test(v) && !v.includes('.')) levels = { count: int('levels', v, 1) };
    else {
      const list = v.split(',').map((s) => Number(s.trim()));
      if (list.some((x) => !Number.isFinite(x) || x <= 0 || x > 1)) {
        throw new UsageError(`reorder.levels must be a count or comma-separated fractions in (0, 1], got "${raw.levels}"`);
      }
      levels = [...new Set(list)].sort((a, b) => a - b);
    }
  }
  let anchors: ReorderOptions['anchors'] = 'default';
  if (raw.anchors !== undefined) {
    const v = raw.anchors.trim();
    if (v.startsWith('[') || v.includes(',') || v.startsWith('l')) {
      const list = v.replace(/^l|^\[|\]$/g, '').split(',').filter(Boolean).map((s) => int('anchors', s, 0));
      anchors = [...new Set(list)].sort((a, b) => a - b);
    } else anchors = int('anchors', v, 0);
  }
  let evaluate: ReorderOptions['evaluate'] = 'auto';
  if (raw.evaluate !== undefined) {
    if (!['true', 'false', 'auto'].includes(raw.evaluate)) throw new UsageError(`reorder.evaluate must be true, false or auto, got "${raw.evaluate}"`);
    evaluate = raw.evaluate === 'auto' ? 'auto' : raw.evaluate === 'true';
  }
  const sizeBy = raw.sizeBy ?? 'total';
  if (sizeBy !== 'total' && sizeBy !== 'blocks') throw new UsageError(`reorder.sizeBy must be total or blocks, got "${sizeBy}"`);
  return {
    importance: importance as ReorderOptions['importance'],
    calibCount: raw.calib !== undefined ? int('calib', raw.calib, 1) : 10,
    calibLength: raw.calibLength !== undefined ? int('calibLength', raw.calibLength, 2) : 64,
    calibText: raw.calibText?.trim() || null,
    seed: raw.seed !== undefined ? int('seed', raw.seed, 0) : 42,
    heldOut: raw.heldOut !== undefined ? int('heldOut', raw.heldOut, 1) : 10,
    anchors,
    levels,
    quantBlock: raw.quantBlock !== undefined ? int('quantBlock', raw.quantBlock, 1) : null,
    evaluate,
    sizeBy,
  };
}

/** Quantization block along K for a target's weight format: in-sliced widths must be multiples of it. */
export function quantBlockFor(target: string, quant: string | undefined): number {
  const q = (quant ?? '').toUpperCase();
  if (/_K|^IQ|^TQ/.test(q)) return 256;
  if (/^Q\d/.test(q)) return 32;
  if (q === '' && target.startsWith('gguf')) return 32; // the GGUF default may be a block format: stay safe
  return 1;
}

/**
 * The qnn target's options and tables (light: the descriptor, the pass manager and --help read them):
 * the Snapdragon SoCs it writes HTP configs for, the chunk length, the encodings layout.
 */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';

/** SoC → Hexagon HTP arch and QNN soc_id (SPEC-outliers §5 [U: check against the pinned SDK]). */
export const SOCS = {
  SM8550: { dspArch: 'v73', socId: 43, name: 'Snapdragon 8 Gen 2' },
  SM8650: { dspArch: 'v75', socId: 57, name: 'Snapdragon 8 Gen 3' },
  SM8750: { dspArch: 'v79', socId: 69, name: 'Snapdragon 8 Elite' },
} as const;
export type Soc = keyof typeof SOCS;
export const SOC_NAMES = Object.keys(SOCS) as Soc[];

export const ENCODINGS_FORMATS = ['legacy', 'aimet1'] as const;
export type EncodingsFormat = (typeof ENCODINGS_FORMATS)[number];

/** The QNN SDK release build-qnn.sh was written against (flags and JSON keys differ between releases). */
export const QNN_SDK_VERSION = '2.28';

export const QNN_FORMATS = ['w8a8'] as const;

export interface QnnOptions {
  soc: Soc;
  /** Prompt chunk length c of the static graphs (their inputs are [1, a, b, h], a·b = c); null: min(256, context). */
  chunk: number | null;
  encodings: EncodingsFormat;
  /** Run build-qnn.sh after writing (needs QNN_SDK_ROOT). */
  build: boolean;
  /** A graph's weights in `<file>.data` beside it: always, never, or when one file would pass protobuf's 2 GiB (auto). */
  externalData: 'auto' | boolean;
}

const SPECS: readonly OptionSpec[] = [
  { key: 'soc', help: `target SoC (HTP arch and soc_id in htp.json): ${SOC_NAMES.map((s) => `${s} (${SOCS[s].dspArch}/${SOCS[s].socId})`).join(', ')}`, default: 'SM8650' },
  { key: 'chunk', help: 'prompt chunk length of the static graphs (inputs [1, a, b, hidden], a·b = chunk)', default: 'min(256, max_position_embeddings)' },
  { key: 'encodings', help: 'quantization encodings JSON layout: legacy (0.6.1, dict by tensor) | aimet1 (1.0.0, lists)', default: 'legacy' },
  { key: 'externalData', help: 'a graph\'s weights in <graph>.onnx.data beside it: true | false | auto (a graph above 2 GiB, e.g. a 128k-vocabulary embedding at 8B)', default: 'auto' },
  { key: 'build', help: 'run build-qnn.sh (qnn-onnx-converter, qnn-model-lib-generator, qnn-context-binary-generator) after writing: true | false', default: 'false' },
];

export function parseQnnOptions(raw: Readonly<Record<string, string>>): QnnOptions {
  let soc: Soc = 'SM8650';
  if (raw.soc !== undefined) {
    const hit = SOC_NAMES.find((s) => s === raw.soc.trim().toUpperCase());
    if (!hit) throw new UsageError(`qnn.soc "${raw.soc}" is not a SoC llmc has an HTP config for; known: ${SOC_NAMES.join(', ')}`);
    soc = hit;
  }
  let chunk: number | null = null;
  if (raw.chunk !== undefined) {
    if (!/^\d+$/.test(raw.chunk.trim()) || Number(raw.chunk) < 1 || Number(raw.chunk) > 8192) throw new UsageError(`qnn.chunk must be an integer in [1, 8192], got "${raw.chunk}"`);
    chunk = Number(raw.chunk);
  }
  const encodings = (raw.encodings ?? 'legacy').trim() as EncodingsFormat;
  if (!ENCODINGS_FORMATS.includes(encodings)) throw new UsageError(`qnn.encodings must be one of ${ENCODINGS_FORMATS.join(', ')}, got "${raw.encodings}"`);
  const build = (raw.build ?? 'false').trim();
  if (build !== 'true' && build !== 'false') throw new UsageError(`qnn.build must be true or false, got "${raw.build}"`);
  const ext = (raw.externalData ?? 'auto').trim();
  if (ext !== 'auto' && ext !== 'true' && ext !== 'false') throw new UsageError(`qnn.externalData must be true, false or auto, got "${raw.externalData}"`);
  return { soc, chunk, encodings, build: build === 'true', externalData: ext === 'auto' ? 'auto' : ext === 'true' };
}

export const QNN_OPTIONS: OptionSchema<QnnOptions> = { specs: SPECS, parse: parseQnnOptions };

/** a·b = c with a ≤ b as close as possible (mllm's closestFactors): the [1, a, b, h] view of a chunk. */
export function closestFactors(c: number): [number, number] {
  let a = Math.floor(Math.sqrt(c));
  while (c % a !== 0) a--;
  return [a, c / a];
}

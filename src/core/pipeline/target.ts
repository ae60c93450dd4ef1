/**
 * The target contract. A target is described by a light descriptor (name, formats, options,
 * capabilities) that the CLI, the pass manager and passes read without loading it; `load()` brings
 * the code that lowers a compile unit to an artifact directory.
 */
import type { Progress } from '../util/progress.js';
import type { RecordType } from '../records/types.js';
import type { OptionSchema } from './options.js';
import type { CompileUnit } from './unit.js';

/** The weight formats the user asked for, validated against the target's format table. */
export interface FormatRequest {
  /** `--quant`, in the table's spelling; undefined: the target's default. */
  quant?: string;
  /** `--tensor-type REGEX=TYPE` overrides, in order (the last match wins). */
  tensorTypes: readonly { pattern: RegExp; type: string }[];
}

export interface TargetFormats {
  /** What `--quant` takes (presets included). */
  quant: readonly string[];
  /** The default `--quant`, or null when every tensor keeps its source dtype. */
  default: string | null;
  /** What `--tensor-type` takes, or null when the target has no per-tensor overrides. */
  tensorTypes: readonly string[] | null;
}

/** Elastic levels in the artifact: any per-layer widths, one width for all layers (and why), or none (the full model only). */
export type ElasticSupport = { kind: 'per-layer' } | { kind: 'uniform'; why: string } | { kind: 'none' };

export interface TargetCapabilities {
  elasticWidths: ElasticSupport;
  /** A format a pass chose per tensor (TensorAnnotation.format) is written as chosen. */
  perTensorFormats: boolean;
  /** Each MoE expert may have its own format (false where a format stacks a layer's experts in one tensor). */
  perExpertFormats: boolean;
  /** Static quantization as quantize/dequantize pairs with scales from a pass. */
  qdq: boolean;
  /** Fixed-shape prompt-chunk subgraphs. */
  chunkGraphs: boolean;
  /**
   * Per-level low-rank adapters (TensorAnnotation.adapters) reach the artifact: carried beside the
   * weights, merged into each level's file, or written as adapter files. Absent: false (a pass need
   * not train what would be dropped).
   */
  adapters?: boolean;
}

export interface EmitContext<O = unknown> {
  outDir: string;
  formats: FormatRequest;
  /** The target's own options (`--opt <target>.key=value`), parsed by its schema. */
  options: O;
  progress: Progress;
  /** Notes for the user (one line each, stderr unless --json). */
  note: (message: string) => void;
}

export interface EmitResult {
  /** Paths relative to outDir, every file the artifact consists of (not the manifest). */
  files: string[];
  /** Goes into the manifest's `targetInfo`. */
  targetInfo: Record<string, unknown>;
}

export interface Target<O = unknown> {
  /** Write the artifact's files (atomically) into ctx.outDir; the driver writes the manifest over them. */
  emit(unit: CompileUnit, ctx: EmitContext<O>): Promise<EmitResult>;
}

export interface TargetDescriptor<O = unknown> {
  name: string;
  description: string;
  formats: TargetFormats;
  options: OptionSchema<O>;
  capabilities: TargetCapabilities;
  /** Quantization block along a row for this request: elastic widths (in-sliced dimensions) align to it. */
  quantBlock(request: FormatRequest): number;
  /** Records some pass must write before this target can lower the unit. */
  requires: readonly RecordType<unknown>[];
  load(): Promise<Target<O>>;
}

/**
 * The compile unit: what passes transform and targets lower.
 *   source       lazy weights + architecture + carried files (tensors are read one at a time)
 *   graph        the IR every executor runs (src/core/ir)
 *   annotations  per-tensor decisions of passes: weight format, quantization scales, outlier
 *                channels, subgraph / partition tags
 *   records      the typed records passes wrote so far (src/core/records), in pass order
 * Units are immutable values: a pass returns a new one (`evolve`).
 */
import type { ModelSource } from '../checkpoint/source.js';
import { UsageError } from '../errors.js';
import { buildModel } from '../ir/build.js';
import type { ModelGraph } from '../ir/ir.js';
import type { PassRecord } from '../records/manifest.js';

/** What passes decided about one tensor (Hugging Face name); absent fields were not decided. */
export interface TensorAnnotation {
  /** Weight format (a name from the target's format table): a per-tensor choice, e.g. per MoE expert. */
  format?: string;
  /** Static quantization scales of the linear's input, weight and output (per tensor). */
  scales?: { input?: number; weight?: number; output?: number };
  /** Input channels kept out of the low-precision path (current channel order). */
  outlierChannels?: number[];
  /** The subgraph / partition the tensor belongs to. */
  partition?: string;
  /**
   * Low-rank adapters of a linear weight, per named set (an elastic level's id): under set s the
   * weight is W_s + scale·B·A, where W_s is the tensor as that set's slice (an elastic level: the
   * prefix sub-model, src/core/pipeline/elastic.ts) and A, B have W_s's shapes.
   */
  adapters?: Readonly<Record<string, LowRankAdapter>>;
  /**
   * The linear's input activations on calibration data (the imatrix pass): per input column the sum
   * over tokens of x², and the tokens summed (for an expert: the tokens routed to it). llama.cpp's
   * importance matrix is sumSq / tokens.
   */
  importance?: InputImportance;
}

export interface InputImportance {
  sumSq: Float64Array;
  tokens: number;
}

/** One LoRA term: A [rank, inFeatures] and B [outFeatures, rank], row-major f32. */
export interface LowRankAdapter {
  rank: number;
  scale: number;
  inFeatures: number;
  outFeatures: number;
  a: Float32Array;
  b: Float32Array;
}

export interface CompileUnit {
  readonly source: ModelSource;
  readonly graph: ModelGraph;
  readonly annotations: ReadonlyMap<string, TensorAnnotation>;
  readonly records: readonly PassRecord[];
}

/** The unit of a checkpoint: its IR built from its architecture, nothing decided yet. */
export function unitOf(source: ModelSource): CompileUnit {
  return { source, graph: buildModel(source.spec), annotations: new Map(), records: [] };
}

/**
 * For targets that rebuild the model from its config instead of lowering `unit.graph` (ts, gguf, hf,
 * tensorrt-llm): a pass's graph edits (outliers.rotate=hadamard's online rotations) would be lost and
 * the weights it rewrote run without them, so such a unit is refused, naming the target.
 */
export function refuseGraphEdits(unit: CompileUnit, target: string): void {
  if (JSON.stringify(unit.graph.ops) === JSON.stringify(buildModel(unit.source.spec).ops)) return;
  throw new UsageError(`target ${target} rebuilds the model from its config and cannot carry a pass's graph edits (outliers.rotate=hadamard): compile for qnn or cuda, or without the edit`);
}

/**
 * A unit with some parts replaced. New weights with another architecture (a sliced level) get
 * their IR rebuilt unless a graph is given; annotations merge field by field.
 */
export function evolve(
  unit: CompileUnit,
  change: { source?: ModelSource; graph?: ModelGraph; annotate?: ReadonlyMap<string, TensorAnnotation>; record?: PassRecord },
): CompileUnit {
  const source = change.source ?? unit.source;
  const graph = change.graph ?? (source.spec === unit.source.spec ? unit.graph : buildModel(source.spec));
  let annotations = unit.annotations;
  if (change.annotate?.size) {
    const merged = new Map(unit.annotations);
    for (const [name, a] of change.annotate) merged.set(name, { ...merged.get(name), ...a });
    annotations = merged;
  }
  const records = change.record ? [...unit.records, change.record] : unit.records;
  return { source, graph, annotations, records };
}

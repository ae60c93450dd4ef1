/**
 * The target contract. A target is described by a light descriptor (name, formats, options,
 * capabilities) that the CLI, the pass manager and passes read without loading it; `load()` brings
 * the code that lowers a compile unit to an artifact directory.
 */
import type { ArchSpec } from '../arch/types.js';
import { UsageError } from '../errors.js';
import type { Level } from '../records/elastic.js';
import type { Manifest } from '../records/manifest.js';
import type { Progress } from '../util/progress.js';
import type { WrittenTensor } from './summary.js';

export type { WrittenTensor };
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
/**
 * `searchPerLayer`: one width by default, but reorder.widths=search's per-layer levels are written too
 * (gguf-levels: llama.cpp's deci) — for the models it returns null for; else why not (refused before any work).
 */
export type ElasticSupport = { kind: 'per-layer' } | { kind: 'uniform'; why: string; searchPerLayer?: (spec: ArchSpec) => string | null } | { kind: 'none' };

/** The engines `llmc run --engine` can name (its parser checks against this list). */
export const RUN_ENGINES = ['sim', 'onnxruntime'] as const;
export type RunEngine = (typeof RUN_ENGINES)[number];

/** What `llmc run --kv-type` keeps the KV cache in (llama.cpp's --cache-type-k/v): float32, IEEE half, or Q8_0 blocks. */
export const KV_TYPES = ['f32', 'f16', 'q8_0'] as const;
export type KvType = (typeof KV_TYPES)[number];

/**
 * Features of a model's graph a target may or may not lower: the model's own (MoE layers, sliding-window
 * attention) and those a pass adds (a verification tree's mask, chunk graphs, shadow outliers). Each
 * target declares every one (TargetCapabilities.lowers); the pass manager refuses a pass that needs one
 * its target does not lower, the compile driver a model that has one.
 */
export const GRAPH_FEATURES = {
  moe: 'mixture-of-experts layers',
  'sliding-window': 'sliding-window attention',
  'tree-mask': "tree attention masks (tree-search's speculative verification tree)",
  'chunk-graphs': 'fixed-shape prompt-chunk graphs (chunked prefill)',
  'shadow-outliers': 'shadow outlier execution (static W8A8 with the outliers added back)',
} as const;
export type GraphFeature = keyof typeof GRAPH_FEATURES;

/**
 * How a target treats one graph feature: `true` lowers it; `false` refuses it; `{ refuses }` refuses it
 * and says why and what to do instead; `{ approximates }` writes the model without it (a note says so
 * at every compile, as llama.cpp's converter does) — for a model feature only, never a pass's.
 */
export type Lowering = boolean | { refuses: string } | { approximates: string };

export interface TargetCapabilities {
  elasticWidths: ElasticSupport;
  /** A format a pass chose per tensor (TensorAnnotation.format) is written as chosen. */
  perTensorFormats: boolean;
  /** Each MoE expert may have its own format (false where a format stacks a layer's experts in one tensor). */
  perExpertFormats: boolean;
  /** Static quantization as quantize/dequantize pairs with scales from a pass. */
  qdq: boolean;
  /** Each graph feature, lowered or not (`llmc list targets` shows them). */
  lowers: Readonly<Record<GraphFeature, Lowering>>;
  /** The engines `llmc run --engine` may choose between for its artifacts (the first is the default); absent: one engine, no choice. */
  engines?: readonly RunEngine[];
  /**
   * Per-level low-rank adapters (TensorAnnotation.adapters) reach the artifact: carried beside the
   * weights, merged into each level's file, or written as adapter files. Absent: false (a pass need
   * not train what would be dropped).
   */
  adapters?: boolean;
  /** `llmc run --speculative` with the verification tree of --passes tree-search. */
  speculative: boolean;
  /** The KV cache types `llmc run --kv-type` may choose between (the first is the runner's default); absent: not selectable. */
  kvTypes?: readonly KvType[];
  /** `llmc run --expert-cache`: an MoE model's routed experts read from the file on demand. */
  expertCache: boolean;
}

/** The target lowers `f` (an `approximates` is not lowering). */
export const lowers = (target: Pick<TargetDescriptor, 'capabilities'>, f: GraphFeature): boolean => target.capabilities.lowers[f] === true;

export interface EmitContext<O = unknown> {
  outDir: string;
  formats: FormatRequest;
  /** The target's own options (`--opt <target>.key=value`), parsed by its schema. */
  options: O;
  progress: Progress;
  /** Notes for the user (one line each, stderr unless --json). */
  note: (message: string) => void;
}

export interface EmitResult<I extends object = object> {
  /** Paths relative to outDir, every file the artifact consists of (not the manifest). */
  files: string[];
  /** Goes into the manifest's `targetInfo`, of the type the descriptor declares (`info`; the driver checks it). */
  targetInfo: I;
  /** Every tensor written, for the compile summary (formats and bytes per tensor group). */
  tensors?: WrittenTensor[];
}

/** What `emit` would write, computed without writing (`llmc compile --dry-run`). */
export interface EmitPlan {
  /** Every file of the artifact (not the manifest), with its exact size. */
  files: { path: string; bytes: number }[];
  /** Every weight tensor as it would be written. */
  tensors: WrittenTensor[];
  notes: string[];
}

export interface Target<O = unknown, I extends object = object> {
  /** Write the artifact's files (atomically) into ctx.outDir; the driver writes the manifest over them. */
  emit(unit: CompileUnit, ctx: EmitContext<O>): Promise<EmitResult<I>>;
  /** The files and tensors `emit` would write, without writing (reads no tensor data). Optional: a target without it cannot --dry-run. */
  plan?(unit: CompileUnit, ctx: Omit<EmitContext<O>, 'progress' | 'note'>): Promise<EmitPlan>;
}

/** An artifact on disk: its manifest, and where it is (a directory, or a single file beside its manifest). */
export interface Artifact {
  /** What the user named: the directory, or the single file. */
  path: string;
  /** The directory the manifest's file paths are relative to. */
  dir: string;
  manifest: Manifest;
}

/** What `ArtifactRunner.generate` is asked for. */
export interface GenerateRequest {
  maxTokens: number;
  temperature?: number;
  topP?: number;
  seed?: number;
  /** Stop after emitting one of these (default: the spec's eosTokenIds; [] = only at maxTokens). */
  stopIds?: readonly number[];
  /** Called with each id as soon as it is chosen, before the next one is computed (streaming). */
  onToken?: (id: number) => void;
}

/**
 * A file in a target's format with no llmc manifest beside it (a GGUF from llama.cpp's converter, a
 * copy): an artifact whose manifest the target made from the file itself (no recorded source:
 * source.sha256 is empty; no file hashes), and what `llmc inspect` shows of it.
 */
export interface ForeignFile extends Artifact {
  description: { json: unknown; text: string };
}

/** Text ↔ token ids: encode adds BOS / EOS as the vocabulary says; decode skips special tokens when asked. */
export interface TextCodec {
  encode(text: string, opts?: { addBos?: boolean }): number[];
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
  /** The tokenizer's eos token, which ends generation too (absent: the engine's spec names it). */
  readonly eosId?: number | null;
}

/** How `llmc run` drives an artifact: prompt ids in, generated ids out. */
export interface ArtifactRunner {
  /** Vocabulary size, context length and stop ids come from here. */
  readonly spec: ArchSpec;
  /** tokenizer.json / tokenizer_config.json text when the artifact carries them. */
  readonly tokenizerJson?: string;
  readonly tokenizerConfigJson?: string;
  /** Text in and out with the artifact's own vocabulary, where its engine tokenizes (llama.cpp: a GGUF's tokenizer.ggml.* metadata); else tokenizerJson. */
  readonly textCodec?: TextCodec;
  /** What the runner chose or ignored, for the user (e.g. the elastic level it runs). */
  readonly notes: string[];
  /** What executes the model, for summaries and reports: 'ts-runtime', 'onnxruntime', 'llama.cpp'. */
  readonly engine: string;
  /** The id of the elastic level it runs, when it runs one. */
  readonly level?: string;
  /** Logits [T, V] at every position of `ids` from an empty context: what quality evaluation compares. */
  logits?(ids: number[]): Promise<Float32Array>;
  /** A chat template carried outside tokenizer_config.json (chat_template.jinja, a GGUF's tokenizer.chat_template); `llmc run --chat` prefers it, as transformers does. */
  readonly chatTemplate?: string;
  /** generation_config.json text when the artifact carries it (its eos_token_id also stops `llmc run`). */
  readonly generationConfigJson?: string;
  /** Generated ids without the prompt; stops after maxTokens or at a stop id (the stop id is included). */
  generate(promptIds: number[], opts: GenerateRequest): Promise<number[]>;
  close(): Promise<void>;
  /** With an expert cache (`RunOptions.experts`): its statistics so far. */
  expertStats?(): ExpertCacheStats | null;
  /** With speculative decoding (`RunOptions.speculative`): the last generation's steps and acceptance. */
  speculativeStats?(): Record<string, unknown> | null;
}

/** What an expert cache counts (the TS runtime's offloading simulator and its runner). */
export interface ExpertCacheCounts {
  /** Expert uses by decode steps (one token): hits and misses as the simulator counts them. */
  accesses: number;
  hits: number;
  /** Experts read from the file: demand loads and preloads. */
  loads: number;
  preloads: number;
  usefulPreloads: number;
  bytesRead: number;
  /** Milliseconds decode steps waited for expert reads (a miss, or a preload still in flight). */
  stallMs: number;
}

export interface ExpertCacheStats extends ExpertCacheCounts {
  capacity: number;
  policy: string;
  preload: number;
}

export interface RunOptions {
  /** CPU threads, where the engine takes a count. */
  threads?: number;
  /** An elastic level (id or fraction), where the artifact has levels. */
  level?: string;
  /** Check every file's sha256 against the manifest before running. */
  verify?: boolean;
  /** MoE: keep routed experts in the file, at most `capacity` in memory (read on demand). */
  experts?: { capacity: number; policy?: 'edgemoe' | 'lru' | 'lfu'; preload?: number };
  /** Greedy speculative decoding with the artifact's verification tree (record spec-tree/1); `draft`: a draft ts artifact. */
  speculative?: { draft?: string };
  /** Chunked prefill through the artifact's chunk plan (record chunk-schedule/1): this chunk length, or the one predicted fastest per prompt. */
  chunk?: number | 'auto';
  /** Where a target offers a choice (capabilities.engines); qnn: `sim` the TS simulation of the device's integer pipeline, or `onnxruntime` on the QDQ graphs. */
  engine?: RunEngine;
  /** Where the target offers it (capabilities.kvTypes): what the KV cache holds its keys and values in. */
  kvType?: KvType;
  /**
   * Quality evaluation: the runner is asked only for these windows' logits (and generates nothing), so
   * a target may compute them together; the ts target then runs a large artifact one layer at a time
   * (`stream`: true / false forces it; default: above the streaming threshold, as the source).
   */
  windows?: { ids: readonly number[][]; stream?: boolean; progress?: Progress };
}

export interface TargetDescriptor<O = unknown, I extends object = object> {
  name: string;
  description: string;
  formats: TargetFormats;
  options: OptionSchema<O>;
  capabilities: TargetCapabilities;
  /**
   * The manifest's targetInfo this target writes, as a record type (src/core/records/target-info.ts):
   * the driver checks what `emit` returns against it; readers get it typed: `info.read(manifest.targetInfo, file)`.
   */
  info: RecordType<I>;
  /** Quantization block along a row for this request: elastic widths (in-sliced dimensions) align to it. */
  quantBlock(request: FormatRequest): number;
  /** Records some pass must write before this target can lower the unit. */
  requires: readonly RecordType<unknown>[];
  /**
   * Refuse an architecture the target cannot express (a UsageError naming what and why), checked once
   * the checkpoint is open and before any pass runs. Absent: every architecture llmc reads.
   */
  checkArch?(spec: ArchSpec): void;
  /** The name the artifact gives a model it takes (llama.cpp's architecture, TensorRT-LLM's class), shown by `llmc list architectures`. */
  writesAs?(spec: ArchSpec): string;
  /** A target whose artifact is one file: `-o NAME<extension>` writes `file` there (manifest beside it). */
  singleFile?: { extension: string; file: string };
  load(): Promise<Target<O, I>>;
  /**
   * Bytes of one elastic level as deployed, where the artifact's layout gives them exactly (a file per
   * level; a tensor table the level's prefixes are cut from). Absent: the level's share of the files.
   */
  levelBytes?(manifest: Manifest, level: Level): number;
  /** Files of this extension without llmc's manifest are read as this target's artifacts (loaded on use). */
  foreign?: { extension: string; open(file: string): Promise<ForeignFile> };
  /** How `llmc run` runs this target's artifacts, when llmc can (loaded on use). */
  open?(artifact: Artifact, opts: RunOptions): Promise<ArtifactRunner>;
}

/** A --tensor-type pattern that matches none of the tensors a target writes is a mistake, not a no-op. */
export function unmatchedPatterns(overrides: FormatRequest['tensorTypes'], names: readonly string[]): void {
  for (const o of overrides) {
    if (!names.some((n) => o.pattern.test(n))) {
      throw new UsageError(`--tensor-type ${o.pattern.source}=${o.type} matches no tensor this target writes; its names look like ${names.slice(0, 3).join(', ')}`);
    }
  }
}

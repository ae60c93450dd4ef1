/**
 * A ts artifact run one piece at a time: the embedding, each decoder layer, the head (the IR's stream
 * segments). A piece's tensors are read from weights.bin when the windows reach it and dropped after,
 * so logits of many windows need one layer's weights in memory, not the model's: the quality
 * evaluation of an artifact too large to load whole (4.46 GB of F32 weights at 1.1B). Each piece
 * runs on the interpreter and kernels the resident Model uses, so the logits are the same bit for bit
 * (an elastic level's adapters merged into each piece's slices where `llmc run --level` merges them at
 * load, else run as low-rank terms).
 * Browser-safe: bytes come from a ByteSource.
 */
import { LlmcError } from '../../core/errors.js';
import type { Op, V } from '../../core/ir/ir.js';
import { buildModel } from '../../core/ir/build.js';
import { withTreeMasks } from '../../core/ir/mask.js';
import { ELASTIC_LEVELS, levelWidths, selectLevel } from '../../core/records/elastic.js';
import { findRecord } from '../../core/records/types.js';
import { silentProgress, type Progress } from '../../core/util/progress.js';
import { streamSegments, type Segment } from '../../core/ir/segments.js';
import { alignUp, type TensorEntry, type TsLevelAdapters } from './format.js';
import { Interpreter, type LayerWidth } from './interpreter.js';
import { Weight } from './kernels.js';
import { adaptersOf, aligned, canMergeLevel, checkArtifact, mergedSliceBytes, mergeIntoSlice, mergesAtLoad, weightOf, type ArtifactSource, type CheckedArtifact } from './load.js';
import type { LevelAdapters } from './lowrank.js';
import { weightTable } from './model.js';
import { WasmArena } from './wasm.js';
import type { PoolOptions } from './pool.js';

/** Every tensor of the artifact an op names (linears, norms, embeddings, routers, experts). */
function tensorsOf(ops: readonly Op[], table: ReadonlyMap<string, unknown>): Set<string> {
  const out = new Set<string>();
  const walk = (v: unknown): void => {
    if (typeof v === 'string') {
      if (table.has(v)) out.add(v);
    } else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  ops.forEach(walk);
  return out;
}

/** A piece's tensors (its level's adapters' included) and the arena bytes they take, merged slices after them. */
interface PieceLayout {
  names: Set<string>;
  adapterSet: TsLevelAdapters | undefined;
  entries: TensorEntry[];
  tensorBytes: number;
  bytes: number;
}

/** One piece of the model with its weights in memory. */
interface LoadedPiece {
  interpreter: Interpreter;
  adapters?: LevelAdapters;
}

/** The logits of windows computed by `StreamedArtifact.windows`: the head stays loaded and runs per window on request. */
export interface WindowLogits {
  /** The elastic level they run (its id), if one was asked for. */
  level?: string;
  /** Logits [T, V] of window i (every position). */
  logits(i: number): Float32Array;
  /** Threads the pieces ran on. */
  threads: number;
  /** End the worker pool (the head's logits then run on this thread). */
  close(): void;
}

/** How `windows` runs: an elastic level, its adapters merged or not, progress, threads. */
export interface WindowOptions {
  /** An elastic level (id or fraction) of an artifact compiled with reorder. */
  level?: string;
  /** Merge the level's adapters into each piece's slices (default: where `llmc run --level` merges them at load). */
  merge?: boolean;
  progress?: Progress;
  /** Threads for the kernels (a worker pool over one shared arena; the logits are the same bits). Default 1. */
  threads?: number;
  /** How the pool's workers start (required with threads > 1). */
  pool?: PoolOptions;
}

export class StreamedArtifact {
  private readonly pieces: Segment[];
  /** The largest tensor dimension: every piece's arena is laid out for it, as the resident model's is. */
  private readonly maxDim: number;

  private constructor(
    private readonly source: ArtifactSource,
    private readonly art: CheckedArtifact,
  ) {
    this.pieces = streamSegments(withTreeMasks(buildModel(art.manifest.arch)));
    this.maxDim = Math.max(...[...art.table.values()].flatMap((e) => e.shape));
  }

  /** Check the artifact (manifest, tensor table, file size) without reading its weights. */
  static async open(source: ArtifactSource): Promise<StreamedArtifact> {
    return new StreamedArtifact(source, await checkArtifact(source));
  }

  get spec() {
    return this.art.manifest.arch;
  }

  /**
   * Run every window through the embedding and the decoder layers, one piece resident at a time (the
   * windows' residual streams carried between pieces), then load the head. Every piece's weights go
   * into one arena, sized for the largest piece and overwritten piece by piece, so one worker pool
   * serves them all.
   */
  async windows(windows: readonly (readonly number[])[], o: WindowOptions = {}): Promise<WindowLogits> {
    const { manifest, where } = this.art;
    const level = o.level === undefined ? undefined : selectLevel(findRecord(manifest.passes, ELASTIC_LEVELS, where('llmc-manifest.json'))?.levels ?? null, o.level, where('llmc-manifest.json'));
    const widths: LayerWidth[] | undefined = level && levelWidths(level);
    // the level's adapters merged into each piece's slices where the resident runner merges them at load
    const merge = level !== undefined && (o.merge ?? mergesAtLoad(manifest, level));
    if (merge && level && !canMergeLevel(level, manifest.arch)) throw new LlmcError(`level ${level.id} keeps some query heads of each group: not a prefix slice to merge into`, this.art.wfile);
    const at = level && { id: level.id, merge };
    const progress = o.progress ?? silentProgress;
    const threads = o.threads ?? 1;
    if (threads > 1 && !o.pool) throw new LlmcError('internal: a layer-streamed run on several threads needs a worker spawner');
    const layouts = this.pieces.map((seg) => this.layout(seg, at));
    const arena = WasmArena.create(Math.max(...layouts.map((l) => l.bytes)), this.maxDim, threads > 1);
    if (arena && threads > 1) await arena.startPool(threads, o.pool!);
    const head = this.pieces[this.pieces.length - 1];
    // per window: the values a later piece reads, by name
    let carried = windows.map(() => new Map<V, Float32Array>());
    progress.start(`the artifact layer by layer, ${windows.length} windows`, this.pieces.length);
    let handedOver = false;
    try {
      for (let i = 0; i + 1 < this.pieces.length; i++) {
        const seg = this.pieces[i];
        const piece = await this.load(seg, layouts[i], at, arena);
        const cache = piece.interpreter.newCache();
        const later = new Set(this.pieces.slice(i + 1).flatMap((s) => s.carriedIn));
        carried = windows.map((ids, w) => {
          cache.length = 0;
          const feeds = new Map(seg.carriedIn.map((v) => [v, carried[w].get(v)!]));
          const outs = piece.interpreter.runValues(ids, cache, allRows(ids.length), seg.carriedOut, widths, { feeds, adapters: piece.adapters });
          const next = new Map([...carried[w]].filter(([v]) => later.has(v)));
          seg.carriedOut.forEach((v, k) => next.set(v, outs[k]));
          return next;
        });
        progress.tick();
      }
      const piece = await this.load(head, layouts[layouts.length - 1], at, arena);
      const cache = piece.interpreter.newCache();
      progress.tick();
      handedOver = true;
      return {
        ...(level ? { level: level.id } : {}),
        threads: arena?.threads ?? 1,
        close: () => arena?.closePool(),
        logits: (w) => {
          if (!(w >= 0 && w < windows.length)) throw new LlmcError(`internal: window ${w} of ${windows.length}`);
          cache.length = 0;
          const ids = windows[w];
          const feeds = new Map(head.carriedIn.map((v) => [v, carried[w].get(v)!]));
          return piece.interpreter.run(ids, cache, allRows(ids.length), widths, { feeds, adapters: piece.adapters });
        },
      };
    } finally {
      if (!handedOver) arena?.closePool();
      progress.done();
    }
  }

  /** A piece's tensors (its level's adapters' included) and the bytes they take in the arena, merged slices after them. */
  private layout(seg: Segment, level: { id: string; merge: boolean } | undefined): PieceLayout {
    const { manifest, table } = this.art;
    const names = tensorsOf(seg.graph.ops, table);
    const adapterSet = level === undefined ? undefined : manifest.targetInfo.adapters?.[level.id];
    const adapted = (adapterSet?.tensors ?? []).filter((t) => names.has(t.weight));
    for (const t of adapted) names.add(t.a).add(t.b);
    const entries = [...names].map((n) => table.get(n)!);
    const tensorBytes = entries.reduce((n, e) => n + alignUp(e.bytes), 0);
    // merged slices go after the piece's tensors, as load() puts a merged level's after weights.bin
    const mergedBytes = level?.merge ? adapted.reduce((n, t) => n + alignUp(mergedSliceBytes(table.get(t.b)!.shape[0], table.get(t.a)!.shape[1])), 0) : 0;
    return { names, adapterSet, entries, tensorBytes, bytes: tensorBytes + mergedBytes };
  }

  /** Read a piece's tensors (and its level's adapters) into the arena, over the piece before, and build its interpreter. */
  private async load(seg: Segment, layout: PieceLayout, level: { id: string; merge: boolean } | undefined, arena: WasmArena | null): Promise<LoadedPiece> {
    const { manifest, wfile } = this.art;
    const levelId = level?.id;
    const { names, adapterSet, entries, tensorBytes: bytes, bytes: total } = layout;
    const all = arena?.weights(total);
    const memory = all?.subarray(0, bytes);
    const weights = new Map<string, Weight>();
    let at = 0;
    for (const e of entries) {
      let data: Uint8Array;
      if (memory) {
        data = memory.subarray(at, at + e.bytes);
        at += alignUp(e.bytes);
        if (this.source.weights.readInto) await this.source.weights.readInto(e.offset, data);
        else data.set(await this.source.weights.read(e.offset, e.bytes));
      } else data = aligned(await this.source.weights.read(e.offset, e.bytes));
      weights.set(e.name, weightOf(e, data, arena));
    }
    const weight = (name: string): Weight => {
      const w = weights.get(name);
      if (!w) throw new LlmcError(`tensor "${name}" is not in model piece ${seg.id}`, wfile);
      return w;
    };
    // a Map whenever the level has adapters, as the resident model passes one to every layer
    const adapters = adapterSet && adaptersOf(adapterSet, weight, (adapted) => names.has(adapted));
    if (level?.merge && adapters) {
      let at = bytes;
      for (const [name, lr] of adapters) {
        const size = mergedSliceBytes(lr.b.rows, lr.a.cols);
        const into = all ? all.subarray(at, at + size) : new Uint8Array(size);
        at += alignUp(size);
        weights.set(name, mergeIntoSlice(weight(name), lr, into, arena, `level ${levelId}'s adapter of ${name}`));
      }
    }
    const channels = new Map(seg.graph.inputs.map((i) => [i.name, i.dims[2]]));
    const interpreter = new Interpreter(manifest.arch, seg.graph, weightTable((n) => weights.has(n), weight, arena === null), {
      inputs: seg.carriedIn.map((name) => ({ name, channels: channels.get(name) as number })),
    });
    return { interpreter, ...(adapters && !level?.merge ? { adapters } : {}) };
  }
}

const allRows = (T: number) => Array.from({ length: T }, (_, t) => t);

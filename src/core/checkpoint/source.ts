/**
 * ModelSource: what passes transform and backends consume. A checkpoint is one; a pass returns
 * another that wraps it (e.g. permuting tensors as they are read), so weights stream through the
 * whole pipeline one tensor at a time.
 */
import type { DType } from './safetensors.js';
import type { ArchSpec } from '../arch/spec.js';

export interface TensorMeta {
  /** Hugging Face name. */
  name: string;
  shape: number[];
  /** Storage dtype in the source (what "keep the source precision" means). */
  dtype: DType;
}

/** Files carried along from the checkpoint, as their raw text. */
export interface ModelAssets {
  /** The parsed config.json (targets that write a Hugging Face dir re-emit it). */
  config: Record<string, unknown>;
  tokenizer?: string;
  tokenizerConfig?: string;
  generationConfig?: string;
}

export interface ModelSource {
  readonly spec: ArchSpec;
  readonly assets: ModelAssets;
  /** Every tensor, in a stable order. */
  readonly tensors: readonly TensorMeta[];
  /** Where it came from, for messages (a directory path, or a pass chain). */
  readonly description: string;
  /** The checkpoint directory the tensors come from (names files in messages and the model). */
  readonly dir: string;
  meta(name: string): TensorMeta | undefined;
  /** One tensor as f32, freshly allocated (callers may modify it). */
  readF32(name: string): Promise<Float32Array>;
  /** A content hash: equal hashes mean equal models. */
  identity(): Promise<string>;
}

/** Apply per-tensor rewrites (and an optional spec/config change) on top of a source. */
export function transformSource(
  base: ModelSource,
  opts: {
    label: string;
    /** A hash of the transform's parameters; folded into identity(). */
    paramsHash: string;
    spec?: ArchSpec;
    config?: Record<string, unknown>;
    /** Rewrite a tensor's data; return it unchanged for tensors the transform does not touch. */
    rewrite: (name: string, data: Float32Array) => Float32Array | Promise<Float32Array>;
  },
): ModelSource {
  return {
    spec: opts.spec ?? base.spec,
    assets: opts.config ? { ...base.assets, config: opts.config } : base.assets,
    tensors: base.tensors,
    description: `${base.description} | ${opts.label}`,
    dir: base.dir,
    meta: (name) => base.meta(name),
    readF32: async (name) => opts.rewrite(name, await base.readF32(name)),
    identity: async () => {
      const { createHash } = await import('node:crypto');
      return createHash('sha256').update(await base.identity()).update(opts.label).update(opts.paramsHash).digest('hex');
    },
  };
}

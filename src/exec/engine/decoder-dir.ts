/**
 * An exported decoder graph (src/exec/onnx/decoder.ts: input_ids, attention_mask, position_ids,
 * past_key_values.{l}.key|value → logits, present.{l}.key|value) run on onnxruntime-node, as
 * `llmc run` runs a `cuda` artifact. The KV cache's shapes and element type come from the graph's
 * own input metadata, so any graph of that convention runs (float32 or float16 cache, per-layer KV
 * heads of an elastic level).
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import './ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { artifactSessionOptions } from './session-options.js';
import { normalizeConfig, type ArchSpec } from '../../core/arch/spec.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { Sampler, type SamplingOptions } from '../../core/sampling.js';
import type { ArtifactRunner } from '../../core/pipeline/target.js';
import { parseJsonObject } from '../../core/util/json.js';

const firstLine = (err: unknown) => String((err as Error)?.message ?? err).split('\n')[0];

interface CacheInput {
  name: string;
  /** The present.* output that feeds it next step. */
  present: string;
  type: 'float32' | 'float16';
  heads: number;
  headDim: number;
}

export class OnnxDecoder {
  private constructor(
    readonly session: ort.InferenceSession,
    readonly cache: CacheInput[],
    readonly vocab: number,
    private readonly file: string,
  ) {}

  static async open(file: string, opts: { threads?: number } = {}): Promise<OnnxDecoder> {
    return OnnxDecoder.load(file, opts).catch((err: unknown) => {
      throw err instanceof LlmcError ? err : new LlmcError(`onnxruntime cannot load the graph: ${firstLine(err)}`, file);
    });
  }

  private static async load(file: string, opts: { threads?: number }): Promise<OnnxDecoder> {
    const session = await ort.InferenceSession.create(file, artifactSessionOptions(opts.threads));
    try {
      return OnnxDecoder.describe(session, file);
    } catch (err) {
      await session.release();
      throw err;
    }
  }

  /** The cache inputs and vocabulary of a decoder graph of the Optimum layout. */
  private static describe(session: ort.InferenceSession, file: string): OnnxDecoder {
    const cache: CacheInput[] = [];
    for (const m of session.inputMetadata) {
      const match = /^past_key_values\.(\d+)\.(key|value)$/.exec(m.name);
      if (!match) continue;
      if (!m.isTensor || (m.type !== 'float32' && m.type !== 'float16')) throw new LlmcError(`input ${m.name} is not a float tensor`, file);
      const [, heads, , headDim] = m.shape;
      if (typeof heads !== 'number' || typeof headDim !== 'number') throw new LlmcError(`input ${m.name} needs fixed head and head_dim dims`, file);
      cache.push({ name: m.name, present: `present.${match[1]}.${match[2]}`, type: m.type, heads, headDim });
    }
    for (const need of ['input_ids', 'attention_mask', 'position_ids']) {
      if (!session.inputNames.includes(need)) throw new LlmcError(`the graph has no input ${need}: not a decoder graph of the Optimum layout`, file);
    }
    const logits = session.outputMetadata.find((m) => m.name === 'logits');
    const vocab = logits?.isTensor ? logits.shape.at(-1) : undefined;
    if (typeof vocab !== 'number') throw new LlmcError('the graph has no logits output [batch, sequence, vocab]', file);
    return new OnnxDecoder(session, cache, vocab, file);
  }

  /**
   * One forward pass of one sequence: `ids` after `pastLength` cached positions (`past` null at the
   * start); logits [T, V] at every new position and the grown cache.
   */
  async forward(ids: number[], past: ort.Tensor[] | null, pastLength: number): Promise<{ logits: Float32Array; present: ort.Tensor[] }> {
    const T = ids.length;
    const big = (xs: number[]) => BigInt64Array.from(xs, (x) => BigInt(x));
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', big(ids), [1, T]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(pastLength + T).fill(1n), [1, pastLength + T]),
      position_ids: new ort.Tensor('int64', big(ids.map((_, i) => pastLength + i)), [1, T]),
    };
    this.cache.forEach((c, i) => {
      const empty = c.type === 'float16' ? new Uint16Array(0) : new Float32Array(0);
      feeds[c.name] = past ? past[i] : new ort.Tensor(c.type, empty, [1, c.heads, 0, c.headDim]);
    });
    // A graph that loads can still fail to run (a damaged file, shapes that do not meet): one line.
    const out = await this.session.run(feeds).catch((err: unknown) => {
      throw new LlmcError(`onnxruntime cannot run the graph: ${firstLine(err)}`, this.file);
    });
    return { logits: out.logits.data as Float32Array, present: this.cache.map((c) => out[c.present]) };
  }

  /** Logits [T, V] at every position of `ids`, no cache. */
  async logits(ids: number[]): Promise<Float32Array> {
    return (await this.forward(ids, null, 0)).logits;
  }

  /** Generated ids (without the prompt); stops after maxTokens or a stop id (which is included). */
  async generate(promptIds: number[], opts: { maxTokens: number; stopIds: readonly number[]; onToken?: (id: number) => void } & SamplingOptions): Promise<number[]> {
    for (const id of promptIds) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocab) throw new UsageError(`token id ${id} is outside the vocabulary [0, ${this.vocab})`);
    }
    const sampler = new Sampler(opts);
    const stop = new Set(opts.stopIds);
    const out: number[] = [];
    if (opts.maxTokens <= 0) return out;
    let r = await this.forward(promptIds, null, 0);
    let length = promptIds.length;
    for (;;) {
      const next = sampler.next(r.logits.subarray(r.logits.length - this.vocab));
      out.push(next);
      opts.onToken?.(next);
      if (out.length >= opts.maxTokens || stop.has(next)) return out;
      r = await this.forward([next], r.present, length);
      length++;
    }
  }

  close(): Promise<void> {
    return this.session.release();
  }
}

const readOptional = (file: string) => fsp.readFile(file, 'utf8').catch(() => undefined);

/**
 * `llmc run` on a decoder directory: config.json (architecture, stop ids), `graph` (default
 * onnx/model.onnx) and the tokenizer files when present.
 */
export async function openDecoderDir(dir: string, opts: { threads?: number; graph?: string } = {}): Promise<ArtifactRunner & { decoder: OnnxDecoder }> {
  const configFile = path.join(dir, 'config.json');
  const configText = await readOptional(configFile);
  if (configText === undefined) throw new LlmcError('missing config.json', dir);
  const spec: ArchSpec = normalizeConfig(parseJsonObject(configText, configFile), configFile);
  const decoder = await OnnxDecoder.open(path.join(dir, opts.graph ?? 'onnx/model.onnx'), opts);
  return {
    spec,
    decoder,
    notes: [],
    engine: 'onnxruntime',
    logits: (ids) => decoder.logits(ids),
    tokenizerJson: await readOptional(path.join(dir, 'tokenizer.json')),
    tokenizerConfigJson: await readOptional(path.join(dir, 'tokenizer_config.json')),
    generationConfigJson: await readOptional(path.join(dir, 'generation_config.json')),
    chatTemplate: await readOptional(path.join(dir, 'chat_template.jinja')),
    generate: (promptIds, o) => decoder.generate(promptIds, { ...o, stopIds: o.stopIds ?? spec.eosTokenIds }),
    close: () => decoder.close(),
  };
}

/**
 * A Hugging Face checkpoint directory: config.json + safetensors (single or sharded) + optional
 * tokenizer files. Opening validates everything cheap to validate (headers, shapes against
 * config.json); tensor data is read only when asked for, one tensor at a time.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { LlmcError, summarize } from '../errors.js';
import { ioError } from '../util/atomic.js';
import { cachedSha256Files } from '../util/digest-cache.js';
import { expectedTensorCount, expectedTensors } from '../arch/names.js';
import { SafetensorsFile, toF32, type TensorInfo } from './safetensors.js';
import { matrixOf, type ModelAssets, type ModelSource, type StoredLayout, type TensorMeta } from './source.js';
import { normalizeConfig, type ArchSpec } from '../arch/spec.js';
import { archOf, type ArchEntry } from '../arch/registry.js';
import { firstNonFinite, nonFiniteError } from './finite.js';
import { parseJsonObject } from '../util/json.js';

export interface OpenOptions {
  /** Read Inf/NaN weights as they are instead of refusing them (--allow-nonfinite). */
  allowNonFinite?: boolean;
}

const INDEX = 'model.safetensors.index.json';
const SINGLE = 'model.safetensors';

/** JSON files this large are no checkpoint's (tokenizer.json files run to tens of MB). */
const MAX_JSON_BYTES = 256 << 20;

async function readText(file: string): Promise<string | undefined> {
  try {
    const st = await fsp.stat(file);
    // Only regular files (a FIFO would block), of a size a JSON file of a checkpoint can have.
    if (!st.isFile()) throw new LlmcError('not a regular file', file);
    if (st.size > MAX_JSON_BYTES) throw new LlmcError(`${st.size} bytes is too large for this file`, file);
    return await fsp.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw ioError(err, file, 'read');
  }
}

const parseJson = (text: string, file: string): Record<string, unknown> => parseJsonObject(text, file, { maxBytes: 64 * 2 ** 20 });

/**
 * Fused tensors (phi3 qkv_proj, gate_up_proj) replaced, in place in the listing, by their row ranges
 * under the names the IR reads: a row range of a row-major tensor is itself a contiguous byte range,
 * so every reader (f32, raw bytes, byte-range layouts) sees ordinary tensors.
 */
function splitFused(spec: ArchSpec, infos: Map<string, TensorInfo>, configFile: string): void {
  const family: ArchEntry = archOf(spec);
  if (!family.fused) return;
  const byName = new Map<string, TensorInfo[]>();
  for (let l = 0; l < spec.numLayers; l++) {
    for (const f of family.fused(l, spec)) {
      const info = infos.get(f.name);
      if (!info) continue; // named as missing below, under the parts' names
      const rows = f.parts.reduce((a, p) => a + p.rows, 0);
      if (info.shape.length !== 2 || info.shape[0] !== rows) {
        throw new LlmcError(`tensor "${f.name}" has shape [${info.shape}] but config.json implies ${rows} rows (${f.parts.map((p) => p.rows).join(' + ')})`, info.file);
      }
      const cols = info.shape[1];
      const esize = info.byteLength / (rows * cols);
      let at = info.offset;
      byName.set(
        f.name,
        f.parts.map((p) => {
          const part: TensorInfo = { name: p.name, dtype: info.dtype, shape: [p.rows, cols], file: info.file, offset: at, byteLength: p.rows * cols * esize };
          at += part.byteLength;
          if (infos.has(p.name)) throw new LlmcError(`the checkpoint holds both "${f.name}" and "${p.name}"`, configFile);
          return part;
        }),
      );
    }
  }
  if (byName.size === 0) return;
  const all = [...infos.values()];
  infos.clear();
  for (const t of all) for (const u of byName.get(t.name) ?? [t]) infos.set(u.name, u);
}

export class Checkpoint implements ModelSource {
  private hash: Promise<string> | undefined;

  private constructor(
    readonly dir: string,
    readonly spec: ArchSpec,
    readonly assets: ModelAssets,
    readonly files: SafetensorsFile[],
    readonly infos: Map<string, TensorInfo>,
    readonly tensors: readonly TensorMeta[],
    readonly allowNonFinite: boolean,
  ) {}

  get description(): string {
    return this.dir;
  }

  static async open(dir: string, opts: OpenOptions = {}): Promise<Checkpoint> {
    const stat = await fsp.stat(dir).catch((err) => {
      throw ioError(err, dir, 'open checkpoint');
    });
    if (!stat.isDirectory()) throw new LlmcError('not a directory: expected a Hugging Face checkpoint directory (config.json + *.safetensors)', dir);
    const configFile = path.join(dir, 'config.json');
    const configText = await readText(configFile);
    if (configText === undefined) throw new LlmcError('missing config.json: not a Hugging Face checkpoint directory', dir);
    const config = parseJson(configText, configFile);
    const spec = normalizeConfig(config, configFile);

    const shardFiles = await Checkpoint.shardList(dir);
    const files: SafetensorsFile[] = [];
    try {
      for (const f of shardFiles.files) files.push(await SafetensorsFile.open(f));
      const infos = new Map<string, TensorInfo>();
      for (const f of files) {
        for (const [name, info] of f.tensors) {
          if (infos.has(name)) throw new LlmcError(`tensor "${name}" appears in two shards`, f.path);
          infos.set(name, info);
        }
      }
      if (shardFiles.weightMap) {
        for (const [name, file] of shardFiles.weightMap) {
          const info = infos.get(name);
          if (!info) throw new LlmcError(`shard index lists tensor "${name}" in ${path.basename(file)}, but it is not there`, path.join(dir, INDEX));
          if (info.file !== file) throw new LlmcError(`shard index puts "${name}" in ${path.basename(file)}, but it is in ${path.basename(info.file)}`, path.join(dir, INDEX));
        }
      }
      splitFused(spec, infos, configFile);
      // Listing what config.json expects is bounded by what the files hold (a config claiming 1e6
      // layers must not build millions of names); a few missing tensors get named one by one below.
      const want = expectedTensorCount(spec);
      if (want > 2 * infos.size + 64) {
        throw new LlmcError(`config.json describes a model of ${want} tensors (${spec.numLayers} layers${spec.moe ? `, ${spec.moe.numExperts} experts each` : ''}); the checkpoint holds ${infos.size}`, configFile);
      }
      for (const exp of expectedTensors(spec)) {
        const info = infos.get(exp.name);
        if (!info) throw new LlmcError(`missing tensor "${exp.name}" required by config.json (${spec.modelType})`, dir);
        if (info.shape.join(',') !== exp.shape.join(',')) {
          throw new LlmcError(`tensor "${exp.name}" has shape [${info.shape}] but config.json implies [${exp.shape}]`, info.file);
        }
        if (!['F32', 'F16', 'BF16', 'F64'].includes(info.dtype)) {
          throw new LlmcError(`tensor "${exp.name}" has dtype ${info.dtype}; weights must be F32, F16 or BF16`, info.file);
        }
      }
      const assets: ModelAssets = {
        config,
        tokenizer: await readText(path.join(dir, 'tokenizer.json')),
        tokenizerConfig: await readText(path.join(dir, 'tokenizer_config.json')),
        generationConfig: await readText(path.join(dir, 'generation_config.json')),
        chatTemplate: await readText(path.join(dir, 'chat_template.jinja')),
      };
      const tensors = [...infos.values()].map(({ name, shape, dtype }) => ({ name, shape, dtype }));
      return new Checkpoint(dir, spec, assets, files, infos, tensors, opts.allowNonFinite ?? false);
    } catch (err) {
      await Promise.all(files.map((f) => f.close()));
      throw err;
    }
  }

  private static async shardList(dir: string): Promise<{ files: string[]; weightMap?: Map<string, string> }> {
    const indexFile = path.join(dir, INDEX);
    const indexText = await readText(indexFile);
    if (indexText !== undefined) {
      const index = parseJson(indexText, indexFile);
      const wm = index.weight_map;
      if (typeof wm !== 'object' || wm === null) throw new LlmcError('missing "weight_map"', indexFile);
      const weightMap = new Map<string, string>();
      for (const [name, f] of Object.entries(wm as Record<string, unknown>)) {
        if (typeof f !== 'string' || f.includes('/') || f.includes('\\') || f === '.' || f === '..' || f.includes('\0') || !f) {
          throw new LlmcError(`bad shard file name ${summarize(f)} for "${name}" (a shard is a file in the checkpoint directory)`, indexFile);
        }
        weightMap.set(name, path.join(dir, f));
      }
      const files = [...new Set(weightMap.values())].sort();
      for (const f of files) {
        try {
          await fsp.access(f);
        } catch {
          throw new LlmcError(`shard index names ${path.basename(f)}, which does not exist`, indexFile);
        }
      }
      return { files, weightMap };
    }
    const single = path.join(dir, SINGLE);
    try {
      await fsp.access(single);
      return { files: [single] };
    } catch {
      const any = (await fsp.readdir(dir)).filter((f) => f.endsWith('.safetensors')).sort();
      if (any.length === 0) throw new LlmcError('no model.safetensors or model.safetensors.index.json found', dir);
      return { files: any.map((f) => path.join(dir, f)) };
    }
  }

  meta(name: string): TensorMeta | undefined {
    const i = this.infos.get(name);
    return i && { name: i.name, shape: i.shape, dtype: i.dtype };
  }

  layout(name: string): StoredLayout | null {
    const i = this.infos.get(name);
    return i ? { file: i.file, offset: i.offset, dtype: i.dtype, ...matrixOf(i.shape) } : null;
  }

  info(name: string): TensorInfo {
    const i = this.infos.get(name);
    if (!i) throw new LlmcError(`no tensor "${name}"`, this.dir);
    return i;
  }

  private fileOf(info: TensorInfo): SafetensorsFile {
    return this.files.find((f) => f.path === info.file)!;
  }

  async readRaw(name: string): Promise<Buffer> {
    const info = this.info(name);
    return this.fileOf(info).readRaw(info);
  }

  /** Raw bytes of one tensor read into `target` (reused by streaming callers); returns the filled part. */
  async readRawInto(name: string, target: Uint8Array): Promise<Buffer> {
    const info = this.info(name);
    return this.fileOf(info).readInto(info, target);
  }

  /**
   * Half-precision tensors are read into a pooled scratch buffer and decoded into the fresh
   * result, so a tensor-by-tensor pass allocates only its f32 outputs (peak memory and page
   * faults follow the largest tensor, not the sum of raw + decoded copies awaiting GC).
   */
  private scratch: Uint8Array[] = [];

  async readF32(name: string): Promise<Float32Array> {
    const data = await this.decodeF32(name);
    if (!this.allowNonFinite) {
      const i = firstNonFinite(data);
      if (i >= 0) throw nonFiniteError(name, data[i], i, this.info(name).file);
    }
    return data;
  }

  private async decodeF32(name: string): Promise<Float32Array> {
    const info = this.info(name);
    if (info.dtype === 'F32') {
      // Straight into the result's own memory: no intermediate copy.
      const out = new Float32Array(info.byteLength / 4);
      await this.fileOf(info).readInto(info, new Uint8Array(out.buffer));
      return out;
    }
    if (info.dtype === 'F16' || info.dtype === 'BF16') {
      // Concurrent reads each take their own scratch buffer from the pool.
      const i = this.scratch.findIndex((b) => b.byteLength >= info.byteLength);
      const buf = i >= 0 ? this.scratch.splice(i, 1)[0] : new Uint8Array(info.byteLength);
      try {
        const raw = await this.fileOf(info).readInto(info, buf);
        return toF32(raw, info.dtype, name);
      } finally {
        this.scratch.push(buf);
        if (this.scratch.length > 2) this.scratch.sort((a, b) => b.byteLength - a.byteLength).length = 2;
      }
    }
    return toF32(await this.readRaw(name), info.dtype, name);
  }

  /**
   * sha256 over config.json and every shard's bytes (big checkpoints on a worker thread, see sha256Files;
   * remembered across runs while the files are unchanged, see digest-cache.ts).
   */
  identity(): Promise<string> {
    this.hash ??= cachedSha256Files(this.files.map((f) => f.path), JSON.stringify(this.assets.config)).catch((err) => {
      this.hash = undefined;
      throw ioError(err, this.dir, 'read');
    });
    return this.hash;
  }

  async close(): Promise<void> {
    this.scratch = [];
    await Promise.all(this.files.map((f) => f.close()));
  }
}

export async function openCheckpoint(dir: string, opts: OpenOptions = {}): Promise<Checkpoint> {
  return Checkpoint.open(dir, opts);
}

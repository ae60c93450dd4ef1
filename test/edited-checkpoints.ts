/** Test checkpoints made from others by hand (float32 safetensors + config.json), as an independent reference. */
import { promises as fsp, readFileSync } from 'node:fs';
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { writeSafetensors } from '../src/core/checkpoint/safetensors.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';

type Json = Record<string, unknown>;
type Edit = (name: string, data: Float32Array, shape: readonly number[]) => { data: Float32Array; shape: readonly number[] };

/** `source`'s tensors, each through `edit`, written to `out` with `config` as its config.json. */
export async function writeEdited(source: ModelSource, config: Json, out: string, edit: Edit): Promise<string> {
  const tensors = await Promise.all(
    source.tensors.map(async (t) => {
      const { data, shape } = edit(t.name, await source.readF32(t.name), t.shape);
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      return { name: t.name, dtype: 'F32' as const, shape: [...shape], bytes: async () => bytes };
    }),
  );
  await fsp.mkdir(out, { recursive: true });
  await writeSafetensors(path.join(out, 'model.safetensors'), tensors);
  await fsp.writeFile(path.join(out, 'config.json'), JSON.stringify(config));
  return out;
}

/**
 * The olmoe checkpoint in `dir` with its KV heads repeated (num_key_value_heads = num_attention_heads):
 * the same function (each query head reads the same keys and values; k_norm's mean over duplicated
 * channels is the mean over the originals), in the layout llama.cpp's olmoe loads (it has no GQA).
 */
export async function olmoeWithoutGqa(dir: string, out: string): Promise<string> {
  const cfg = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as Json;
  const H = cfg.num_attention_heads as number;
  const G = cfg.num_key_value_heads as number;
  const hd = cfg.head_dim as number;
  const ck = await openCheckpoint(dir);
  try {
    return await writeEdited(ck, { ...cfg, num_key_value_heads: H }, out, (name, data, shape) => {
      if (!/\.(k_proj|v_proj)\.weight$|\.k_norm\.weight$/.test(name)) return { data, shape };
      const cols = shape.length === 2 ? shape[1] : 1;
      const rep = new Float32Array(H * hd * cols);
      for (let h = 0; h < H; h++) rep.set(data.subarray(Math.floor(h / (H / G)) * hd * cols, (Math.floor(h / (H / G)) + 1) * hd * cols), h * hd * cols);
      return { data: rep, shape: shape.length === 2 ? [H * hd, cols] : [H * hd] };
    });
  } finally {
    await ck.close();
  }
}

/**
 * A GGUF without llmc's manifest beside it (llama.cpp's converter output, a copy, one file of a
 * gguf-levels directory) as an artifact: its manifest is made from the file's own header, so
 * `llmc inspect`, `run` and `report` treat it as a gguf artifact. Such a manifest records no source
 * checkpoint (source.sha256 is empty: quality needs `--source DIR`) and no file hash.
 */
import path from 'node:path';
import type { ForeignFile } from '../../src/core/pipeline/target.js';
import { tensorGroups } from '../../src/core/pipeline/summary.js';
import { MANIFEST_FORMAT, MANIFEST_VERSION, type Manifest } from '../../src/core/records/manifest.js';
import { LLMC_VERSION } from '../../src/core/version.js';
import { describeGguf, formatGguf } from './describe.js';
import { ggufArchSpec, readGgufHeader } from './read.js';

/** The component a llama.cpp tensor name belongs to (gguf-py's tensor map, the names llama.cpp loads). */
function groupOf(name: string): string {
  if (name.startsWith('token_embd.')) return 'embedding';
  if (name.startsWith('output.')) return 'lm_head';
  if (name === 'output_norm.weight' || /_norm\.weight$/.test(name)) return 'norms';
  if (/\.ffn_gate_inp(_shexp)?\./.test(name)) return 'router';
  if (/\.ffn_(gate|up|down)_shexp\./.test(name)) return 'shared_expert';
  if (/\.ffn_(gate|up|down)_exps\./.test(name)) return 'experts';
  if (/\.ffn_/.test(name)) return 'mlp';
  if (/\.attn_/.test(name)) return 'attention';
  return 'other';
}

export async function openBareGguf(file: string): Promise<ForeignFile> {
  const header = await readGgufHeader(file);
  const arch = ggufArchSpec(header, file);
  const name = path.basename(file);
  const tensors = header.tensors.map((t) => ({ name: t.name, sources: [], format: t.type, bytes: t.nbytes, group: groupOf(t.name) }));
  const bytes = tensors.reduce((s, t) => s + t.bytes, 0);
  const manifest: Manifest = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    llmcVersion: LLMC_VERSION,
    target: 'gguf',
    source: { path: '', sha256: '' },
    arch,
    targetInfo: { file: name, manifest: false, architecture: header.metadata.get('general.architecture'), name: header.metadata.get('general.name') ?? null },
    passes: [],
    files: [{ path: name, size: header.fileSize, sha256: '' }],
    summary: { groups: tensorGroups(arch, tensors), bytes, sourceBytes: 0 },
  };
  const d = describeGguf(file, header, arch);
  return { path: file, dir: path.dirname(file), manifest, description: { json: d, text: formatGguf(d, manifest.summary!.groups) } };
}

/**
 * What `llmc inspect` shows of a GGUF without llmc's manifest: the model its metadata describes, the
 * tensors per ggml type, the tokenizer (llama.cpp's tokenizer.ggml.* keys) and the chat template.
 */
import type { ArchSpec } from '../../src/core/arch/types.js';
import type { GgufHeader, GgufMetaValue } from './read.js';

export interface GgufDescription {
  file: string;
  version: number;
  bytes: number;
  name: string | null;
  architecture: string;
  spec: ArchSpec;
  fileType: number | null;
  tensors: number;
  types: Record<string, { tensors: number; bytes: number }>;
  tokenizer: {
    model: string | null;
    pre: string | null;
    tokens: number;
    merges: number;
    bosTokenId: number | null;
    eosTokenId: number | null;
    addBosToken: boolean | null;
    addEosToken: boolean | null;
    chatTemplate: string | null;
  };
  /** Every metadata key; an array is shown as its length and item kind (a vocabulary is thousands of strings). */
  metadata: Record<string, unknown>;
}

const scalar = <T>(v: GgufMetaValue | undefined, kind: string): T | null => (typeof v === kind ? (v as T) : null);
const idOf = (v: GgufMetaValue | undefined): number | null => (typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : null);

export function describeGguf(file: string, h: GgufHeader, spec: ArchSpec): GgufDescription {
  const md = h.metadata;
  const types: GgufDescription['types'] = {};
  for (const t of h.tensors) {
    const e = (types[t.type] ??= { tensors: 0, bytes: 0 });
    e.tensors++;
    e.bytes += t.nbytes;
  }
  const metadata: Record<string, unknown> = {};
  for (const [k, v] of md) {
    metadata[k] = Array.isArray(v) ? { array: v.length, of: v.length ? typeof v[0] : null } : typeof v === 'bigint' ? Number(v) : v;
  }
  const len = (k: string) => {
    const v = md.get(k);
    return Array.isArray(v) ? v.length : 0;
  };
  return {
    file,
    version: h.version,
    bytes: h.fileSize,
    name: scalar<string>(md.get('general.name'), 'string'),
    architecture: String(md.get('general.architecture')),
    spec,
    fileType: idOf(md.get('general.file_type')),
    tensors: h.tensors.length,
    types,
    tokenizer: {
      model: scalar<string>(md.get('tokenizer.ggml.model'), 'string'),
      pre: scalar<string>(md.get('tokenizer.ggml.pre'), 'string'),
      tokens: len('tokenizer.ggml.tokens'),
      merges: len('tokenizer.ggml.merges'),
      bosTokenId: idOf(md.get('tokenizer.ggml.bos_token_id')),
      eosTokenId: idOf(md.get('tokenizer.ggml.eos_token_id')),
      addBosToken: scalar<boolean>(md.get('tokenizer.ggml.add_bos_token'), 'boolean'),
      addEosToken: scalar<boolean>(md.get('tokenizer.ggml.add_eos_token'), 'boolean'),
      chatTemplate: scalar<string>(md.get('tokenizer.chat_template'), 'string'),
    },
    metadata,
  };
}

const bytes = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} kB` : `${n} B`);

/** The description for people (llmc inspect without --json). */
export function formatGguf(d: GgufDescription, groups: readonly { group: string; format: string; tensors: number; bytes: number }[]): string {
  const s = d.spec;
  const t = d.tokenizer;
  const rows = (cells: string[][]) => {
    const w = cells[0].map((_, c) => Math.max(...cells.map((r) => r[c].length)));
    return cells.map((r) => `  ${r.map((x, c) => x.padEnd(w[c])).join('  ').trimEnd()}`);
  };
  const lines = [
    `gguf: ${d.file} (GGUF v${d.version}, ${bytes(d.bytes)}; no llmc manifest: read from its own metadata)`,
    `name: ${d.name ?? '-'}`,
    `architecture: ${d.architecture} (${s.modelType}), ${s.numLayers} layers, hidden ${s.hiddenSize}, heads ${s.numHeads} (kv ${s.numKvHeads}), head_dim ${s.headDim}`,
    `  feed-forward ${s.intermediateSize}, vocab ${s.vocabSize}, context ${s.maxPositions}, rope_theta ${s.ropeTheta}` +
      `${s.ropeScaling ? `, rope scaling ${s.ropeScaling.type}${'factor' in s.ropeScaling ? ` ×${s.ropeScaling.factor}` : ''}` : ''}${s.tieEmbeddings ? ', tied embeddings' : ''}${s.qkvBias ? ', q/k/v bias' : ''}`,
  ];
  if (s.moe) {
    lines.push(`  MoE: ${s.moe.numExperts} experts, top-${s.moe.topK}, expert feed-forward ${s.moe.expertIntermediateSize}${s.moe.sharedExpertIntermediateSize ? `, shared expert ${s.moe.sharedExpertIntermediateSize}` : ''}`);
  }
  lines.push(`tensors (${d.tensors}):`, ...rows([['group', 'type', 'count', 'bytes'], ...groups.map((g) => [g.group, g.format, String(g.tensors), bytes(g.bytes)])]));
  lines.push(
    `tokenizer: ${t.model ?? 'none'}${t.pre ? ` (pre ${t.pre})` : ''}, ${t.tokens} tokens${t.merges ? `, ${t.merges} merges` : ''}, bos ${t.bosTokenId ?? '-'}, eos ${t.eosTokenId ?? '-'}` +
      `${t.addBosToken !== null ? `, add_bos_token ${t.addBosToken}` : ''}`,
    `chat template: ${t.chatTemplate === null ? 'none' : `${t.chatTemplate.length} characters (tokenizer.chat_template)`}`,
  );
  return lines.join('\n') + '\n';
}

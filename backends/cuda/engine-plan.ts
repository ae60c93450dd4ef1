/**
 * The TensorRT build plan of a cuda artifact: optimization-profile shape ranges (min / opt / max)
 * per device profile, and build-engine.sh, which runs trtexec with them. The ranges go into the
 * manifest too, so what the engine accepts is on record beside the graph.
 *
 * Profiles (one TensorRT optimization profile each; `opt` favours decode, one new token):
 *   desktop   batch ≤ 8, context ≤ 8192,  prefill chunks ≤ 2048, workspace 8 GiB
 *   orin      batch ≤ 4, context ≤ 4096,  prefill chunks ≤ 512,  workspace 4 GiB (Jetson AGX Orin, TensorRT 10)
 *   orin-dla  orin's ranges with DLA core 0 and GPU fallback (DLA runs fp16/int8 layers it supports)
 *   xavier    batch 1,   context ≤ 2048,  prefill chunks ≤ 256,  workspace 2 GiB (JetPack 5: TensorRT 8.5/8.6)
 * Every range is capped by max_position_embeddings (and cuda.maxContext).
 */
import type { DecoderIo } from '../../src/exec/onnx/decoder.js';
import { DECODER_IO } from '../../src/exec/onnx/decoder.js';
import { DEVICE_PROFILES, type DeviceProfile } from './options.js';

interface DeviceLimits {
  maxBatch: number;
  maxContext: number;
  maxChunk: number;
  workspaceMiB: number;
  dla: boolean;
  note: string;
}

export const DEVICES: Record<DeviceProfile, DeviceLimits> = {
  desktop: { maxBatch: 8, maxContext: 8192, maxChunk: 2048, workspaceMiB: 8192, dla: false, note: 'desktop / server GPU, TensorRT 10' },
  orin: { maxBatch: 4, maxContext: 4096, maxChunk: 512, workspaceMiB: 4096, dla: false, note: 'Jetson AGX Orin (JetPack 6, TensorRT 10)' },
  'orin-dla': { maxBatch: 4, maxContext: 4096, maxChunk: 512, workspaceMiB: 4096, dla: true, note: 'Jetson Orin with DLA core 0, GPU fallback for what DLA cannot run' },
  xavier: { maxBatch: 1, maxContext: 2048, maxChunk: 256, workspaceMiB: 2048, dla: false, note: 'Jetson AGX Xavier (JetPack 5, TensorRT 8.5/8.6: opset ≤ 17, no int4)' },
};

export interface ShapeRange {
  min: number[];
  opt: number[];
  max: number[];
}

export interface EngineProfile {
  device: DeviceProfile;
  note: string;
  workspaceMiB: number;
  dla: boolean;
  /** batch / new tokens / cached tokens / context (cached + new). */
  dims: Record<'batch' | 'sequence' | 'past' | 'total', { min: number; opt: number; max: number }>;
  /** Per graph input. */
  shapes: Record<string, ShapeRange>;
}

export function engineProfile(device: DeviceProfile, io: DecoderIo, maxContext: number | null): EngineProfile {
  const d = DEVICES[device];
  const context = Math.max(2, Math.min(d.maxContext, io.maxPositions, maxContext ?? Infinity));
  const chunk = Math.min(d.maxChunk, context);
  const dims = {
    batch: { min: 1, opt: 1, max: d.maxBatch },
    sequence: { min: 1, opt: 1, max: chunk },
    past: { min: 0, opt: Math.floor(context / 2), max: context - 1 },
    total: { min: 1, opt: Math.floor(context / 2) + 1, max: context },
  };
  const range = (f: (k: 'min' | 'opt' | 'max') => number[]): ShapeRange => ({ min: f('min'), opt: f('opt'), max: f('max') });
  const shapes: Record<string, ShapeRange> = {
    [DECODER_IO.inputIds]: range((k) => [dims.batch[k], dims.sequence[k]]),
    [DECODER_IO.attentionMask]: range((k) => [dims.batch[k], dims.total[k]]),
    [DECODER_IO.positionIds]: range((k) => [dims.batch[k], dims.sequence[k]]),
  };
  io.kvHeads.forEach((h, l) => {
    for (const name of [DECODER_IO.pastKey(l), DECODER_IO.pastValue(l)]) shapes[name] = range((k) => [dims.batch[k], h, dims.past[k], io.headDim]);
  });
  return { device, note: d.note, workspaceMiB: d.workspaceMiB, dla: d.dla, dims, shapes };
}

/** trtexec's --minShapes/--optShapes/--maxShapes value. */
export function shapeFlag(p: EngineProfile, k: 'min' | 'opt' | 'max'): string {
  return Object.entries(p.shapes)
    .map(([name, r]) => `${name}:${r[k].join('x')}`)
    .join(',');
}

/** What the script needs to know about one graph it can build. */
export interface GraphFacts {
  file: string;
  opset: number;
  compute: 'fp32' | 'fp16';
  matMulNBits: boolean;
  int8: boolean;
  io: DecoderIo;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** build-engine.sh: trtexec over one of the artifact's graphs with a device profile. */
export function buildScript(graphs: GraphFacts[], maxContext: number | null): string {
  const L: string[] = [];
  L.push(
    '#!/usr/bin/env bash',
    '# Builds a TensorRT engine from this directory\'s ONNX graph with trtexec (written by llmc; see docs/cuda.md).',
    '#   ./build-engine.sh [profile] [graph]        profile: ' + DEVICE_PROFILES.join(' | ') + ' (default desktop)',
    '#                                              graph: ' + graphs.map((g) => g.file).join(' | '),
    '# Writes engine/<graph name>.<profile>.plan. TRTEXEC=/path/to/trtexec overrides the search.',
    'set -euo pipefail',
    'cd "$(dirname "${BASH_SOURCE[0]}")"',
    'profile="${1:-desktop}"',
    `graph="\${2:-${graphs[0].file}}"`,
    '',
    'die() { echo "build-engine.sh: $*" >&2; exit "${CODE:-1}"; }',
    '',
    'trtexec="${TRTEXEC:-}"',
    'if [ -z "$trtexec" ]; then trtexec="$(command -v trtexec || true)"; fi',
    'if [ -z "$trtexec" ] && [ -x /usr/src/tensorrt/bin/trtexec ]; then trtexec=/usr/src/tensorrt/bin/trtexec; fi',
    'if [ -z "$trtexec" ]; then',
    '  CODE=127 die "trtexec (TensorRT\'s command-line builder) is not on PATH nor at /usr/src/tensorrt/bin/trtexec. On Jetson it comes with JetPack (the tensorrt packages; then /usr/src/tensorrt/bin/trtexec); on a desktop install TensorRT 10 and put its bin/ on PATH, or set TRTEXEC=/path/to/trtexec. The ONNX graph runs without TensorRT: llmc run <this dir>, or onnxruntime."',
    'fi',
    '',
    'case "$graph" in',
  );
  for (const g of graphs) {
    L.push(`  ${q(g.file)})`, `    opset=${g.opset}; compute=${g.compute}; matmulnbits=${g.matMulNBits ? 1 : 0}; int8=${g.int8 ? 1 : 0}`);
    L.push('    case "$profile" in');
    for (const device of DEVICE_PROFILES) {
      const p = engineProfile(device, g.io, maxContext);
      L.push(
        `      ${device})`,
        `        min=${q(shapeFlag(p, 'min'))}`,
        `        opt=${q(shapeFlag(p, 'opt'))}`,
        `        max=${q(shapeFlag(p, 'max'))}`,
        `        workspace=${p.workspaceMiB}; dla=${p.dla ? 1 : 0} ;;`,
      );
    }
    L.push(`      *) die "unknown profile \\"$profile\\"; profiles: ${DEVICE_PROFILES.join(', ')}" ;;`, '    esac ;;');
  }
  L.push(
    `  *) die "unknown graph \\"$graph\\"; graphs: ${graphs.map((g) => g.file).join(', ')}" ;;`,
    'esac',
    '',
    'if [ "$matmulnbits" = 1 ]; then',
    '  die "$graph uses com.microsoft MatMulNBits (onnxruntime\'s int4), which TensorRT cannot parse: recompile with --opt cuda.int4=dequantizelinear (int4 as opset-21 blocked DequantizeLinear, TensorRT 10) or another --quant."',
    'fi',
    'help="$("$trtexec" --help 2>&1 || true)"',
    'strongly=0',
    'if grep -q -- --stronglyTyped <<<"$help"; then strongly=1; fi',
    'if [ "$opset" -ge 21 ] && [ "$strongly" = 0 ]; then',
    '  die "$graph is opset $opset (int4 DequantizeLinear), which needs TensorRT 10; this trtexec is older (Xavier\'s JetPack 5 stops at TensorRT 8.6): recompile with --quant int8 or fp16."',
    'fi',
    'args=(--onnx="$graph" --minShapes="$min" --optShapes="$opt" --maxShapes="$max")',
    'if grep -q -- --memPoolSize <<<"$help"; then args+=(--memPoolSize=workspace:"${workspace}M"); else args+=(--workspace="$workspace"); fi',
    '# The graph states its precisions (float16 compute with float32 RMSNorm / softmax, int8/int4 weight-only',
    '# DequantizeLinear): TensorRT 10 follows them as typed (--stronglyTyped); older ones get the precision flags.',
    'if [ "$strongly" = 1 ]; then args+=(--stronglyTyped); else',
    '  if [ "$compute" = fp16 ]; then args+=(--fp16); fi',
    '  if [ "$int8" = 1 ]; then args+=(--int8); fi',
    'fi',
    'if [ "$dla" = 1 ]; then args+=(--useDLACore=0 --allowGPUFallback); if [ "$strongly" = 1 ]; then :; else args+=(--fp16); fi; fi',
    'mkdir -p engine',
    'name="$(basename "$graph" .onnx)"',
    'plan="engine/$name.$profile.plan"',
    'echo "build-engine.sh: $trtexec ${args[*]} --saveEngine=$plan" >&2',
    '"$trtexec" "${args[@]}" --saveEngine="$plan"',
    'echo "$plan"',
    '',
  );
  return L.join('\n');
}

/**
 * The TensorRT build plan of a cuda artifact: optimization profiles (min / opt / max shape ranges)
 * per device, and build-engine.sh, which runs trtexec with them. The ranges go into the manifest
 * too, so what the engine accepts is on record beside the graph.
 *
 * Two profiles per device (trtexec ≥ 10: `--profile=0 --minShapes … --profile=1 …`; the runtime
 * picks one per call with setOptimizationProfileAsync):
 *   0 prefill   a prompt chunk of up to `maxChunk` new tokens, tuned at a whole chunk on an empty cache;
 *   1 decode    exactly one new token, tuned at half the context cached.
 * TensorRT 8 (Xavier) builds one profile spanning both (its trtexec has no --profile for builds).
 * DLA (orin-dla) takes static shapes only (min = opt = max; a dynamic profile sends every layer to
 * the GPU): batch 1, prefill a whole chunk and decode one token, each against a cache of fixed
 * length (context − new tokens) whose unused slots the runtime masks with attention_mask zeros.
 *
 * Devices:
 *   desktop   batch ≤ 8, context ≤ 8192,  prefill chunks ≤ 2048, workspace 8 GiB
 *   orin      batch ≤ 4, context ≤ 4096,  prefill chunks ≤ 512,  workspace 4 GiB (Jetson AGX Orin, TensorRT 10)
 *   orin-dla  batch 1,   context ≤ 4096,  chunks of 512, static,   DLA core 0 with GPU fallback
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
  'orin-dla': { maxBatch: 1, maxContext: 4096, maxChunk: 512, workspaceMiB: 4096, dla: true, note: 'Jetson Orin with DLA core 0 (static shapes), GPU fallback for what DLA cannot run' },
  xavier: { maxBatch: 1, maxContext: 2048, maxChunk: 256, workspaceMiB: 2048, dla: false, note: 'Jetson AGX Xavier (JetPack 5, TensorRT 8.5/8.6: opset ≤ 17, no int4)' },
};

export interface ShapeRange {
  min: number[];
  opt: number[];
  max: number[];
}

type Dim = { min: number; opt: number; max: number };
/** batch / new tokens / cached tokens / context (cached + new). */
export type ProfileDims = Record<'batch' | 'sequence' | 'past' | 'total', Dim>;

export interface ShapeProfile {
  name: 'prefill' | 'decode' | 'any';
  dims: ProfileDims;
  /** Per graph input. */
  shapes: Record<string, ShapeRange>;
}

export interface EngineProfile {
  device: DeviceProfile;
  note: string;
  workspaceMiB: number;
  dla: boolean;
  /** TensorRT 10: profile 0 prefill, profile 1 decode. */
  profiles: [ShapeProfile, ShapeProfile];
  /** TensorRT 8 (one build profile): the union of the two. */
  single: ShapeProfile;
}

function shapesOf(io: DecoderIo, dims: ProfileDims): Record<string, ShapeRange> {
  const range = (f: (k: 'min' | 'opt' | 'max') => number[]): ShapeRange => ({ min: f('min'), opt: f('opt'), max: f('max') });
  const shapes: Record<string, ShapeRange> = {
    [DECODER_IO.inputIds]: range((k) => [dims.batch[k], dims.sequence[k]]),
    [DECODER_IO.attentionMask]: range((k) => [dims.batch[k], dims.total[k]]),
    [DECODER_IO.positionIds]: range((k) => [dims.batch[k], dims.sequence[k]]),
  };
  io.kvHeads.forEach((h, l) => {
    for (const name of [DECODER_IO.pastKey(l), DECODER_IO.pastValue(l)]) shapes[name] = range((k) => [dims.batch[k], h, dims.past[k], io.headDim]);
  });
  return shapes;
}

export function engineProfile(device: DeviceProfile, io: DecoderIo, maxContext: number | null): EngineProfile {
  const d = DEVICES[device];
  const context = Math.max(2, Math.min(d.maxContext, io.maxPositions, maxContext ?? Infinity));
  const chunk = Math.min(d.maxChunk, context - 1);
  const fixed = (n: number): Dim => ({ min: n, opt: n, max: n });
  const batch: Dim = { min: 1, opt: 1, max: d.maxBatch };
  let prefill: ProfileDims;
  let decode: ProfileDims;
  if (d.dla) {
    prefill = { batch: fixed(1), sequence: fixed(chunk), past: fixed(context - chunk), total: fixed(context) };
    decode = { batch: fixed(1), sequence: fixed(1), past: fixed(context - 1), total: fixed(context) };
  } else {
    prefill = { batch, sequence: { min: 1, opt: chunk, max: chunk }, past: { min: 0, opt: 0, max: context - 1 }, total: { min: 1, opt: chunk, max: context } };
    decode = { batch, sequence: fixed(1), past: { min: 0, opt: Math.floor(context / 2), max: context - 1 }, total: { min: 1, opt: Math.floor(context / 2) + 1, max: context } };
  }
  const any: ProfileDims = { ...decode, sequence: { min: 1, opt: 1, max: chunk } };
  const shaped = (name: ShapeProfile['name'], dims: ProfileDims): ShapeProfile => ({ name, dims, shapes: shapesOf(io, dims) });
  return {
    device,
    note: d.note,
    workspaceMiB: d.workspaceMiB,
    dla: d.dla,
    profiles: [shaped('prefill', prefill), shaped('decode', decode)],
    single: shaped('any', d.dla ? decode : any),
  };
}

/** trtexec's --minShapes/--optShapes/--maxShapes value: `name:AxBxC,…`. */
export function shapeFlag(p: ShapeProfile, k: 'min' | 'opt' | 'max'): string {
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
  /** int8 DequantizeLinear weights (TensorRT 8 needs --int8 for them). */
  int8: boolean;
  /** Any DequantizeLinear weights (int8 or int4): their scales' type is the matmuls' type under --stronglyTyped. */
  dequantized: boolean;
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
    L.push(`  ${q(g.file)})`, `    opset=${g.opset}; compute=${g.compute}; matmulnbits=${g.matMulNBits ? 1 : 0}; int8=${g.int8 ? 1 : 0}; dequantized=${g.dequantized ? 1 : 0}`);
    L.push('    case "$profile" in');
    for (const device of DEVICE_PROFILES) {
      const p = engineProfile(device, g.io, maxContext);
      const flags = (sp: ShapeProfile) => (['min', 'opt', 'max'] as const).map((k) => `--${k}Shapes=${shapeFlag(sp, k)}`);
      const [prefill, decode] = p.profiles;
      L.push(
        `      ${device})`,
        `        profiles=(--profile=0 ${flags(prefill).map(q).join(' ')} --profile=1 ${flags(decode).map(q).join(' ')})`,
        `        single=(${flags(p.single).map(q).join(' ')})`,
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
    '# TensorRT 10 builds strongly typed (every tensor has the type the graph gives it) and takes several',
    '# optimization profiles (--profile=N before each --minShapes/--optShapes/--maxShapes group).',
    'strongly=0',
    'if grep -q -- --stronglyTyped <<<"$help"; then strongly=1; fi',
    'multiprofile=0',
    'if grep -q -- "multiple profiles" <<<"$help"; then multiprofile=1; fi',
    'if [ "$opset" -ge 21 ] && [ "$strongly" = 0 ]; then',
    '  die "$graph is opset $opset (int4 DequantizeLinear), which needs TensorRT 10; this trtexec is older (Xavier\'s JetPack 5 stops at TensorRT 8.6): recompile with --quant int8 or fp16."',
    'fi',
    'if [ "$opset" -gt 17 ] && [ "$strongly" = 0 ]; then',
    '  die "$graph is opset $opset (int8 DequantizeLinear with float16 scales), which needs TensorRT 10; this trtexec is older: recompile without --opt cuda.compute=fp16 (TensorRT 8 then runs it with --int8 --fp16)."',
    'fi',
    'if [ "$dla" = 1 ] && [ "$strongly" = 1 ] && [ "$compute" = fp32 ]; then',
    '  die "DLA runs float16 and int8 layers only, and a strongly typed build keeps this graph\'s float32 compute: recompile with --quant fp16 (or --opt cuda.compute=fp16) for orin-dla."',
    'fi',
    'args=(--onnx="$graph")',
    'if [ "$multiprofile" = 1 ]; then args+=("${profiles[@]}"); else args+=("${single[@]}"); fi',
    'if grep -q -- --memPoolSize <<<"$help"; then args+=(--memPoolSize=workspace:"${workspace}M"); else args+=(--workspace="$workspace"); fi',
    '# Precisions: TensorRT 10 follows the graph as typed (--stronglyTyped; precision flags are refused',
    '# there): float16 compute with float32 RMSNorm / softmax islands, int8 / int4 weights dequantized into',
    '# the compute type by their DequantizeLinear scales (fp32 scales: fp32 matmuls, hence the note below).',
    '# TensorRT 8 has no typed mode: --fp16 lets float16 kernels run, --int8 is required for any',
    '# DequantizeLinear (explicit quantization) graph.',
    'if [ "$strongly" = 1 ]; then',
    '  args+=(--stronglyTyped)',
    '  if [ "$dequantized" = 1 ] && [ "$compute" = fp32 ]; then echo "build-engine.sh: note: $graph dequantizes its weights to float32 (cuda.compute=fp32), so TensorRT runs its matmuls in float32; --opt cuda.compute=fp16 gives float16 matmuls" >&2; fi',
    'else',
    '  if [ "$compute" = fp16 ] || [ "$dla" = 1 ]; then args+=(--fp16); fi',
    '  if [ "$int8" = 1 ]; then args+=(--int8); fi',
    'fi',
    'if [ "$dla" = 1 ]; then args+=(--useDLACore=0 --allowGPUFallback); fi',
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

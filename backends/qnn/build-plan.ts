/**
 * The QNN SDK side of a qnn artifact: the HTP backend configs for the chosen SoC (htp_ext.json,
 * htp.json; SPEC-outliers §5 step 5) and build-qnn.sh, which turns every static subgraph into a
 * pre-finalized context binary (qnn-onnx-converter with --quantization_overrides →
 * qnn-model-lib-generator → qnn-context-binary-generator, all on the host, into one context). Key names and flags follow QNN SDK
 * QNN_SDK_VERSION (they differ between releases [U]); the script checks the SDK it finds and says
 * exactly which tool, library or version is missing.
 */
import path from 'node:path';
import { QNN_SDK_VERSION, SOCS, type Soc } from './options.js';

export const HTP_EXT = 'htp_ext.json';
export const HTP_CONFIG = 'htp.json';
export const BUILD_SCRIPT = 'build-qnn.sh';

export function htpExtJson(): string {
  return JSON.stringify({ backend_extensions: { shared_library_path: 'libQnnHtpNetRunExtensions.so', config_file_path: HTP_CONFIG } }, null, 2) + '\n';
}

/** Graph options (VTCM, O3) for the NPU graphs, the device (arch, soc_id) and weight sharing (v73+). */
export function htpJson(soc: Soc, graphNames: string[]): string {
  const s = SOCS[soc];
  return (
    JSON.stringify(
      {
        graphs: [{ graph_names: graphNames.map(qnnGraphName), vtcm_mb: 8, O: 3 }],
        devices: [{ dsp_arch: s.dspArch, soc_id: s.socId, pd_session: 'unsigned', cores: [{ perf_profile: 'burst' }] }],
        context: { weight_sharing_enabled: true },
      },
      null,
      2,
    ) + '\n'
  );
}

/** One static NPU graph as the script converts it. */
export interface ScriptGraph {
  id: string;
  onnx: string;
  encodings: string;
  inputs: { name: string; shape: (number | string)[] }[];
}

/** The one context binary build-qnn.sh writes: every NPU graph in it, weights shared (htp.json). */
export const CONTEXT_BINARY = 'ctx/llmc.bin';

/**
 * A subgraph's graph (and model library) name in the QNN toolchain: the converter names the graph
 * after its output file, which must be a C identifier ("l0.qkv" → "l0_qkv").
 */
export const qnnGraphName = (id: string) => {
  const n = id.replace(/[^A-Za-z0-9_]/g, '_');
  return /^[0-9]/.test(n) ? `g_${n}` : n;
};

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * build-qnn.sh. Every tool runs on the x86_64 Linux host, as the SDK ships them: the converter, the
 * model-library generator (host libraries, -t x86_64-linux-clang: the context-binary generator loads
 * them here) and qnn-context-binary-generator with the host's libQnnHtp.so, which prepares the
 * graphs for the SoC named in htp.json. One generator call takes every model library (--model
 * a.so,b.so,...), so all graphs land in one context and weight_sharing_enabled can share their
 * weights. The context binary runs on the device as it is; `aarch64-android` adds the device's QNN
 * runtime libraries (libQnnHtp.so, the HTP stub and skel for the SoC's arch) beside it in device/.
 */
export function buildScript(graphs: ScriptGraph[], soc: Soc): string {
  const s = SOCS[soc];
  const arch = s.dspArch.toUpperCase(); // libQnnHtpV75Stub.so
  const lines = [
    '#!/usr/bin/env bash',
    `# One context binary (${CONTEXT_BINARY}) for the ${graphs.length} NPU graphs of this artifact (${soc}: HTP ${s.dspArch}, soc_id ${s.socId}), written by llmc.`,
    `# Needs the Qualcomm AI Engine Direct (QNN) SDK ${QNN_SDK_VERSION} on an x86_64 Linux host: export QNN_SDK_ROOT=/path/to/qairt/<version>.`,
    '# Usage: ./build-qnn.sh [target]',
    '#   x86_64-linux-clang (default): the context binary, for the host HTP simulator or a device;',
    '#   aarch64-android: the same context binary, plus in device/ the QNN runtime libraries an Android device loads it with.',
    '# Every tool runs on the host; the context-binary generator loads the host (x86_64) model libraries.',
    'set -euo pipefail',
    'cd "$(dirname "$0")"',
    `EXPECTED=${QNN_SDK_VERSION}`,
    'TARGET="${1:-x86_64-linux-clang}"',
    'case "$TARGET" in x86_64-linux-clang|aarch64-android) ;; *) echo "build-qnn.sh: unknown target $TARGET (x86_64-linux-clang or aarch64-android)" >&2; exit 2 ;; esac',
    'if [ -z "${QNN_SDK_ROOT:-}" ]; then',
    '  echo "build-qnn.sh: QNN_SDK_ROOT is not set: install the QNN SDK $EXPECTED and export QNN_SDK_ROOT (then source \\$QNN_SDK_ROOT/bin/envsetup.sh)" >&2',
    '  exit 127',
    'fi',
    'FOUND=unknown',
    'if [ -f "$QNN_SDK_ROOT/sdk.yaml" ]; then FOUND=$(sed -n "s/^version: *//p" "$QNN_SDK_ROOT/sdk.yaml" | head -n1); fi',
    'if [ "$FOUND" = unknown ]; then FOUND=$(basename "$QNN_SDK_ROOT"); fi',
    'HOST=x86_64-linux-clang',
    'BIN="$QNN_SDK_ROOT/bin/$HOST"',
    'for tool in qnn-onnx-converter qnn-model-lib-generator qnn-context-binary-generator; do',
    '  if [ ! -x "$BIN/$tool" ]; then',
    '    echo "build-qnn.sh: $tool is missing from $BIN (QNN SDK $FOUND at $QNN_SDK_ROOT; this artifact was written for $EXPECTED)" >&2',
    '    exit 127',
    '  fi',
    'done',
    'need() { if [ ! -f "$1" ]; then echo "build-qnn.sh: $(basename "$1") is missing from $(dirname "$1") (QNN SDK $FOUND; $EXPECTED expected)" >&2; exit 127; fi; }',
    '# The generator prepares the graphs on the host: the host HTP backend.',
    'HTP="$QNN_SDK_ROOT/lib/$HOST/libQnnHtp.so"',
    'need "$HTP"',
    'if [ "$TARGET" = aarch64-android ]; then',
    '  need "$QNN_SDK_ROOT/lib/aarch64-android/libQnnHtp.so"',
    `  need "$QNN_SDK_ROOT/lib/aarch64-android/libQnnHtp${arch}Stub.so"`,
    `  need "$QNN_SDK_ROOT/lib/hexagon-${s.dspArch}/unsigned/libQnnHtp${arch}Skel.so"`,
    'fi',
    'case "$FOUND" in "$EXPECTED"*) ;; *) echo "build-qnn.sh: note: QNN SDK $FOUND found, this artifact was written for $EXPECTED (converter flags and encodings keys differ between releases)" >&2 ;; esac',
    'rm -rf build ctx',
    'mkdir -p build ctx',
    'MODELS=()',
    'convert() { # graph-name onnx encodings input-dims...',
    '  local name="$1" onnx="$2" enc="$3"; shift 3',
    '  echo "build-qnn.sh: $name" >&2',
    '  # build/<name>.cpp and build/<name>.bin; the graph is named after the file',
    '  "$BIN/qnn-onnx-converter" --input_network "$onnx" "$@" --quantization_overrides "$enc" \\',
    '    --act_bitwidth 8 --weights_bitwidth 8 --bias_bitwidth 32 --float_fallback --float_bitwidth 16 -o "build/$name.cpp"',
    '  "$BIN/qnn-model-lib-generator" -c "build/$name.cpp" -b "build/$name.bin" -t "$HOST" -l "$name" -o build/libs',
    '  MODELS+=("build/libs/$HOST/lib$name.so")',
    '}',
  ];
  for (const g of graphs) {
    const dims = g.inputs.map((i) => `-d ${q(i.name)} ${i.shape.join(',')}`).join(' ');
    lines.push(`convert ${q(qnnGraphName(g.id))} ${q(g.onnx)} ${q(g.encodings)} ${dims}`);
  }
  const bin = path.posix.basename(CONTEXT_BINARY, '.bin');
  lines.push(
    '# One context for every graph: htp.json lists them all and enables weight sharing.',
    `"$BIN/qnn-context-binary-generator" --backend "$HTP" --model "$(IFS=,; echo "\${MODELS[*]}")" --binary_file ${bin} --config_file ${HTP_EXT} --output_dir ${path.posix.dirname(CONTEXT_BINARY)}`,
    'if [ "$TARGET" = aarch64-android ]; then',
    '  rm -rf device && mkdir -p device',
    `  cp ${CONTEXT_BINARY} "$QNN_SDK_ROOT/lib/aarch64-android/libQnnHtp.so" "$QNN_SDK_ROOT/lib/aarch64-android/libQnnHtp${arch}Stub.so" "$QNN_SDK_ROOT/lib/hexagon-${s.dspArch}/unsigned/libQnnHtp${arch}Skel.so" device/`,
    `  echo "build-qnn.sh: device/ holds ${path.posix.basename(CONTEXT_BINARY)} and the aarch64-android QNN HTP libraries" >&2`,
    'fi',
    `echo "build-qnn.sh: ${CONTEXT_BINARY}: one context, ${graphs.length} graphs, weights shared"`,
    '',
  );
  return lines.join('\n');
}

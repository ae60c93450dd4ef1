/**
 * The QNN SDK side of a qnn artifact: the HTP backend configs for the chosen SoC (htp_ext.json,
 * htp.json; SPEC-outliers §5 step 5) and build-qnn.sh, which turns every static subgraph into a
 * pre-finalized context binary (qnn-onnx-converter with --quantization_overrides →
 * qnn-model-lib-generator → qnn-context-binary-generator). Key names and flags follow QNN SDK
 * QNN_SDK_VERSION (they differ between releases [U]); the script checks the SDK it finds and says
 * exactly which tool, library or version is missing.
 */
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
        graphs: [{ graph_names: graphNames, vtcm_mb: 8, O: 3 }],
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

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export function buildScript(graphs: ScriptGraph[], soc: Soc): string {
  const s = SOCS[soc];
  const lines = [
    '#!/usr/bin/env bash',
    `# Context binaries for the ${graphs.length} NPU graphs of this artifact (${soc}: HTP ${s.dspArch}, soc_id ${s.socId}), written by llmc.`,
    `# Needs the Qualcomm AI Engine Direct (QNN) SDK ${QNN_SDK_VERSION}: export QNN_SDK_ROOT=/path/to/qairt/<version>.`,
    '# Usage: ./build-qnn.sh [target]   target: x86_64-linux-clang (default; the HTP simulator) | aarch64-android',
    'set -euo pipefail',
    'cd "$(dirname "$0")"',
    `EXPECTED=${QNN_SDK_VERSION}`,
    'TARGET="${1:-x86_64-linux-clang}"',
    'if [ -z "${QNN_SDK_ROOT:-}" ]; then',
    '  echo "build-qnn.sh: QNN_SDK_ROOT is not set: install the QNN SDK $EXPECTED and export QNN_SDK_ROOT (then source \\$QNN_SDK_ROOT/bin/envsetup.sh)" >&2',
    '  exit 127',
    'fi',
    'FOUND=unknown',
    'if [ -f "$QNN_SDK_ROOT/sdk.yaml" ]; then FOUND=$(sed -n "s/^version: *//p" "$QNN_SDK_ROOT/sdk.yaml" | head -n1); fi',
    'if [ "$FOUND" = unknown ]; then FOUND=$(basename "$QNN_SDK_ROOT"); fi',
    'BIN="$QNN_SDK_ROOT/bin/x86_64-linux-clang"',
    'for tool in qnn-onnx-converter qnn-model-lib-generator qnn-context-binary-generator; do',
    '  if [ ! -x "$BIN/$tool" ]; then',
    '    echo "build-qnn.sh: $tool is missing from $BIN (QNN SDK $FOUND at $QNN_SDK_ROOT; this artifact was written for $EXPECTED)" >&2',
    '    exit 127',
    '  fi',
    'done',
    'HTP="$QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnHtp.so"',
    'if [ ! -f "$HTP" ]; then echo "build-qnn.sh: libQnnHtp.so is missing from $QNN_SDK_ROOT/lib/x86_64-linux-clang (QNN SDK $FOUND; $EXPECTED expected)" >&2; exit 127; fi',
    'case "$FOUND" in "$EXPECTED"*) ;; *) echo "build-qnn.sh: note: QNN SDK $FOUND found, this artifact was written for $EXPECTED (converter flags and encodings keys differ between releases)" >&2 ;; esac',
    'mkdir -p build ctx',
    'convert() { # id onnx encodings input-dims...',
    '  local id="$1" onnx="$2" enc="$3"; shift 3',
    '  echo "build-qnn.sh: $id" >&2',
    '  "$BIN/qnn-onnx-converter" --input_network "$onnx" "$@" --quantization_overrides "$enc" \\',
    '    --act_bitwidth 8 --weights_bitwidth 8 --bias_bitwidth 32 --float_fallback --float_bitwidth 16 -o "build/$id.cpp"',
    '  "$BIN/qnn-model-lib-generator" -c "build/$id.cpp" -b "build/$id.bin" -o build/libs -t "$TARGET"',
    '  "$BIN/qnn-context-binary-generator" --backend "$HTP" --model "build/libs/$TARGET/lib$id.so" --binary_file "$id" --config_file ' + HTP_EXT + ' --output_dir ctx',
    '}',
  ];
  for (const g of graphs) {
    const dims = g.inputs.map((i) => `-d ${q(i.name)} ${i.shape.join(',')}`).join(' ');
    lines.push(`convert ${q(g.id)} ${q(g.onnx)} ${q(g.encodings)} ${dims}`);
  }
  lines.push(`echo "build-qnn.sh: ${graphs.length} context binaries in ctx/"`, '');
  return lines.join('\n');
}


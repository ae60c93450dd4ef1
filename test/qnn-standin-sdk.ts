/**
 * A stand-in QNN SDK 2.x for tests of build-qnn.sh: the three host tools as small node scripts that
 * check each argument against the documented contract of qnn-onnx-converter,
 * qnn-model-lib-generator and qnn-context-binary-generator (Qualcomm AI Engine Direct SDK, "Tools"),
 * exit 1 naming the first violation, and write what the real tools write (model .cpp/.bin, lib<name>.so
 * per target, <binary_file>.bin in --output_dir). Libraries carry their architecture, so a host tool
 * handed an aarch64 library fails as dlopen would. Every call is logged to calls.jsonl.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';

const COMMON = String.raw`
const fs = require('node:fs');
const path = require('node:path');
const argv = process.argv.slice(2);
fs.appendFileSync(path.join(process.env.QNN_SDK_ROOT, 'calls.jsonl'), JSON.stringify({ tool: TOOL, argv }) + '\n');
const fail = (why) => { process.stderr.write(TOOL + ': ' + why + '\n'); process.exit(1); };
// argparse-like: every flag must be known; values follow their flag
const opts = {}; const multi = {};
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (!(a in SPEC)) fail('unrecognized argument ' + a);
  const n = SPEC[a];
  const vals = argv.slice(i + 1, i + 1 + n);
  if (vals.length < n || vals.some((v) => v.startsWith('--'))) fail(a + ' needs ' + n + ' value(s)');
  i += n;
  if (a === '-d') (multi[a] ??= []).push(vals); else opts[a] = n ? vals[0] : true;
}
const isFile = (f) => fs.existsSync(f) && fs.statSync(f).isFile();
const cIdent = /^[A-Za-z_][A-Za-z0-9_]*$/;
const archOf = (f) => (/^arch=(.*)$/m.exec(fs.readFileSync(f, 'utf8')) || [])[1];
`;

const CONVERTER = String.raw`
const TOOL = 'qnn-onnx-converter';
const SPEC = { '--input_network': 1, '-i': 1, '-d': 2, '--quantization_overrides': 1, '--act_bitwidth': 1, '--weights_bitwidth': 1, '--bias_bitwidth': 1, '--float_fallback': 0, '--float_bitwidth': 1, '-o': 1, '--output_path': 1, '--input_list': 1 };
${COMMON}
const net = opts['--input_network'] ?? opts['-i'];
if (!net) fail('--input_network is required');
if (!net.endsWith('.onnx') || !isFile(net)) fail('--input_network ' + net + ': no such .onnx file');
for (const [name, dims] of multi['-d'] ?? []) if (!/^\d+(,\d+)*$/.test(dims)) fail('-d ' + name + ' ' + dims + ': dims are comma-separated integers');
const ov = opts['--quantization_overrides'];
if (ov !== undefined && (!isFile(ov) || !ov.endsWith('.json'))) fail('--quantization_overrides ' + ov + ': no such .json file');
if (opts['--act_bitwidth'] !== undefined && !['8', '16'].includes(opts['--act_bitwidth'])) fail('--act_bitwidth takes 8 or 16');
if (opts['--weights_bitwidth'] !== undefined && !['4', '8'].includes(opts['--weights_bitwidth'])) fail('--weights_bitwidth takes 4 or 8');
if (opts['--bias_bitwidth'] !== undefined && !['8', '32'].includes(opts['--bias_bitwidth'])) fail('--bias_bitwidth takes 8 or 32');
if (opts['--float_bitwidth'] !== undefined && !['16', '32'].includes(opts['--float_bitwidth'])) fail('--float_bitwidth takes 16 or 32');
if (opts['--float_fallback'] && opts['--input_list']) fail('--float_fallback cannot be combined with --input_list');
if (!opts['--float_fallback'] && !opts['--input_list'] && !ov) fail('quantizing needs --input_list, --quantization_overrides or --float_fallback');
const out = opts['-o'] ?? opts['--output_path'];
if (!out || !out.endsWith('.cpp')) fail('-o must name the model .cpp');
const name = path.basename(out, '.cpp');
if (!cIdent.test(name)) fail('model name ' + name + ' (from -o) is not a C identifier');
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, 'graph=' + name + '\n');
fs.writeFileSync(out.replace(/\.cpp$/, '.bin'), 'weights of ' + name + '\n');
`;

const LIBGEN = String.raw`
const TOOL = 'qnn-model-lib-generator';
const SPEC = { '-c': 1, '-b': 1, '-t': 1, '-l': 1, '-o': 1 };
${COMMON}
const cpp = opts['-c'];
if (!cpp || !isFile(cpp)) fail('-c ' + cpp + ': no such model .cpp');
if (opts['-b'] !== undefined && !isFile(opts['-b'])) fail('-b ' + opts['-b'] + ': no such model .bin');
const targets = (opts['-t'] ?? 'aarch64-android x86_64-linux-clang').split(/\s+/);
for (const t of targets) if (!['x86_64-linux-clang', 'aarch64-android', 'aarch64-oe-linux-gcc11.2', 'aarch64-ubuntu-gcc9.4'].includes(t)) fail('unknown target ' + t);
if (targets.includes('aarch64-android') && !process.env.ANDROID_NDK_ROOT) fail('aarch64-android needs ANDROID_NDK_ROOT');
const lib = opts['-l'] ?? 'qnn_model';
const graph = /^graph=(.*)$/m.exec(fs.readFileSync(cpp, 'utf8'))[1];
for (const t of targets) {
  const dir = path.join(opts['-o'] ?? 'lib', t);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'lib' + lib + '.so'), 'arch=' + t + '\ngraph=' + graph + '\n');
}
`;

const CTXGEN = String.raw`
const TOOL = 'qnn-context-binary-generator';
const SPEC = { '--backend': 1, '--model': 1, '--binary_file': 1, '--config_file': 1, '--output_dir': 1, '--log_level': 1, '--model_prefix': 1 };
${COMMON}
const be = opts['--backend'];
if (!be || !isFile(be)) fail('--backend ' + be + ': no such library');
if (archOf(be) !== 'x86_64-linux-clang') fail('--backend ' + be + ' is a ' + archOf(be) + ' library; this x86_64 host tool cannot load it');
if (!opts['--model']) fail('--model is required');
const models = opts['--model'].split(',');
const graphs = [];
for (const m of models) {
  if (!isFile(m)) fail('--model ' + m + ': no such library');
  if (archOf(m) !== 'x86_64-linux-clang') fail('--model ' + m + ' is a ' + archOf(m) + ' library; this x86_64 host tool cannot load it');
  graphs.push(/^graph=(.*)$/m.exec(fs.readFileSync(m, 'utf8'))[1]);
}
const bin = opts['--binary_file'];
if (!bin || bin.includes('/')) fail('--binary_file is a file name (saved in --output_dir), got ' + bin);
const cfgFile = opts['--config_file'];
if (!cfgFile || !isFile(cfgFile)) fail('--config_file ' + cfgFile + ': no such file');
const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8'));
const ext = cfg.backend_extensions;
if (!ext || typeof ext.shared_library_path !== 'string' || typeof ext.config_file_path !== 'string') fail('--config_file needs backend_extensions.shared_library_path and config_file_path');
const htp = JSON.parse(fs.readFileSync(path.resolve(path.dirname(cfgFile), ext.config_file_path), 'utf8'));
const named = new Set((htp.graphs ?? []).flatMap((g) => g.graph_names ?? []));
for (const g of graphs) if (!named.has(g)) fail('graph ' + g + ' has no entry in ' + ext.config_file_path + ' graph_names');
if (graphs.length > 1 && htp.context?.weight_sharing_enabled !== true) fail('several graphs in one context without context.weight_sharing_enabled');
const out = opts['--output_dir'] ?? 'output';
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, bin + '.bin'), JSON.stringify({ graphs, weightSharing: htp.context?.weight_sharing_enabled === true }));
`;

/** The stand-in SDK in `root` (QNN_SDK_ROOT), for HTP arch `dspArch` (e.g. 'v75'). */
export async function standInSdk(root: string, dspArch: string): Promise<{ calls(): Promise<{ tool: string; argv: string[] }[]> }> {
  const bin = path.join(root, 'bin/x86_64-linux-clang');
  await fsp.mkdir(bin, { recursive: true });
  for (const [name, body] of [['qnn-onnx-converter', CONVERTER], ['qnn-model-lib-generator', LIBGEN], ['qnn-context-binary-generator', CTXGEN]]) {
    await fsp.writeFile(path.join(bin, name), `#!/usr/bin/env node\n${body}`, { mode: 0o755 });
  }
  const V = dspArch.toUpperCase();
  const libs: [string, string][] = [
    ['lib/x86_64-linux-clang/libQnnHtp.so', 'x86_64-linux-clang'],
    ['lib/aarch64-android/libQnnHtp.so', 'aarch64-android'],
    [`lib/aarch64-android/libQnnHtp${V}Stub.so`, 'aarch64-android'],
    [`lib/hexagon-${dspArch}/unsigned/libQnnHtp${V}Skel.so`, `hexagon-${dspArch}`],
  ];
  for (const [f, arch] of libs) {
    await fsp.mkdir(path.dirname(path.join(root, f)), { recursive: true });
    await fsp.writeFile(path.join(root, f), `arch=${arch}\n`);
  }
  await fsp.writeFile(path.join(root, 'sdk.yaml'), 'version: 2.28.0.241029\n');
  return {
    async calls() {
      const text = await fsp.readFile(path.join(root, 'calls.jsonl'), 'utf8').catch(() => '');
      return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    },
  };
}

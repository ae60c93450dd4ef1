/**
 * transformers.js in Node on onnxruntime-web's WebAssembly backend, in a child process of
 * bench/peers.bench.ts (onnxruntime-web sets its thread count once per process). In bench/peers,
 * `onnxruntime-node` is an alias of onnxruntime-web, so transformers.js' Node build runs the same
 * WebAssembly as in a browser. Lines of JSON on stdin: {"open": [models dir, model id, threads]},
 * {"round": [prompt, steps]}, {"close": true}; one line back for each: RESULT_MARK, then JSON ({"error"} on failure; other
 * lines on stdout are the libraries' own logs).
 *
 * Run by the bench: `node dist/bench/peers-child.js PEERS_NODE_MODULES`.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { pathToFileURL } from 'node:url';
import { RESULT_MARK, transformersRunner, type Prompt, type Runner } from './peer-drivers.js';

const peers = process.argv[2];
let runner: Runner | undefined;

async function handle(msg: { open?: [string, string, number]; round?: [Prompt, number]; close?: boolean }): Promise<unknown> {
  if (msg.open) {
    const [models, id, threads] = msg.open;
    const tjs = await import(pathToFileURL(path.join(peers, '@huggingface/transformers/dist/transformers.node.mjs')).href);
    const ortDist = path.join(peers, '@huggingface/transformers/node_modules/onnxruntime-node/dist');
    tjs.env.localModelPath = models + path.sep;
    tjs.env.allowRemoteModels = false;
    tjs.env.useWasmCache = false;
    const wasm = tjs.env.backends.onnx.wasm;
    wasm.numThreads = threads;
    wasm.wasmPaths = { mjs: pathToFileURL(path.join(ortDist, 'ort-wasm-simd-threaded.mjs')).href };
    wasm.wasmBinary = readFileSync(path.join(ortDist, 'ort-wasm-simd-threaded.wasm'));
    runner = await transformersRunner(tjs, id);
    return { threads: wasm.numThreads };
  }
  if (msg.round) return runner!.round(...msg.round);
  await runner?.close();
  return { closed: true };
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  handle(JSON.parse(line) as Parameters<typeof handle>[0]).then(
    (r) => process.stdout.write(RESULT_MARK + JSON.stringify(r) + '\n'),
    (e: unknown) => process.stdout.write(RESULT_MARK + JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + '\n'),
  );
});
lines.on('close', () => process.exit(0));

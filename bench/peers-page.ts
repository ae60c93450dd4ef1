/**
 * The Chromium page of bench/peers.bench.ts, bundled by esbuild with the llmc runtime: one runner
 * per page (onnxruntime-web and wllama set their threads once per page), opened from files the
 * bench serves beside it (models/, and the peers' packages under peers/, whose bare imports the
 * page's import map resolves). Driven from Node through window.peerOpen / peerRound / peerClose.
 */
import * as rt from '../src/exec/runtime/index.js';
import { llmcRunner, transformersRunner, wllamaRunner, type Prompt, type Round, type Runner } from './peer-drivers.js';

/** What a page opens: `path` is under models/ (a ts artifact dir, a cuda dir's id, or a .gguf file). */
export interface PageSpec {
  kind: 'llmc' | 'transformers.js' | 'wllama';
  path: string;
  threads: number;
  nCtx: number;
}

declare global {
  interface Window {
    peerOpen(spec: PageSpec): Promise<{ crossOriginIsolated: boolean }>;
    peerRound(a: [Prompt, number]): Promise<Round>;
    peerClose(): Promise<void>;
    peerReady?: boolean;
  }
}

let runner: Runner | undefined;
const at = (rel: string) => new URL(rel, location.href).href;
// A specifier esbuild leaves alone: the peers are loaded by the page, not bundled.
const load = (rel: string): Promise<unknown> => import(/* webpackIgnore: true */ at(rel));

async function open(spec: PageSpec): Promise<Runner> {
  if (spec.kind === 'llmc') {
    const manifest = await (await fetch(`models/${spec.path}/llmc-manifest.json`)).text();
    const model = await rt.load({ manifest, weights: rt.urlSource(at(`models/${spec.path}/weights.bin`)), name: spec.path }, { threads: spec.threads });
    return llmcRunner(model as never);
  }
  if (spec.kind === 'transformers.js') {
    const tjs = (await load('peers/@huggingface/transformers/dist/transformers.web.js')) as { env: Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
    tjs.env.localModelPath = at('models/');
    tjs.env.allowRemoteModels = false;
    tjs.env.allowLocalModels = true;
    tjs.env.useBrowserCache = false;
    tjs.env.useWasmCache = false;
    tjs.env.backends.onnx.wasm.numThreads = spec.threads;
    tjs.env.backends.onnx.wasm.wasmPaths = at('peers/onnxruntime-web/dist/');
    return transformersRunner(tjs, spec.path);
  }
  const gguf = await (await fetch(`models/${spec.path}`)).blob();
  return wllamaRunner(await load('peers/@wllama/wllama/esm/index.js'), at('peers/@wllama/wllama/esm/wasm/wllama.wasm'), gguf, spec.threads, spec.nCtx);
}

window.peerOpen = async (spec) => {
  runner = await open(spec);
  return { crossOriginIsolated: self.crossOriginIsolated };
};
window.peerRound = ([prompt, steps]) => runner!.round(prompt, steps);
window.peerClose = async () => {
  await runner?.close();
  runner = undefined;
};
window.peerReady = true;

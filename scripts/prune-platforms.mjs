// postinstall: keep only what llmc loads on this machine of three native packages that ship more.
// - onnxruntime-node: its library for every OS and CPU in one package (~290 MB; linux x64 is 45 MB).
// - @node-llama-cpp/<os>-<cpu>: npm installs other CPUs' prebuilt llama.cpp too (their package.json
//   lists x64 beside arm64/arm); llmc loads this machine's (getLlama with gpu: false, build: 'never').
//   The GPU builds are not installed at all: package.json's "overrides" point them at a no-op package.
// - node-llama-cpp/llama/gitRelease.bundle: llama.cpp's sources for building from source (34 MB),
//   which llmc never does (build: 'never'; node-llama-cpp downloads them again if a user builds).
// Nothing else is touched; a package that is not installed (npm install --omit=…) is no error.
// LLMC_KEEP_PLATFORMS=1 keeps everything.
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const dirs = (p) => (existsSync(p) ? readdirSync(p, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name) : []);
/** The installed package's directory as Node resolves it from here (not through "exports"), or null. */
const packageDir = (name) => (require.resolve.paths(name) ?? []).map((p) => path.join(p, name)).find((p) => existsSync(path.join(p, 'package.json'))) ?? null;
const removed = [];
const remove = (p, what) => {
  if (!existsSync(p)) return;
  rmSync(p, { recursive: true, force: true });
  removed.push(what);
};

if (process.env.LLMC_KEEP_PLATFORMS !== '1') {
  const ort = packageDir('onnxruntime-node');
  if (ort) {
    const bin = path.join(ort, 'bin');
    for (const napi of dirs(bin)) {
      for (const os of dirs(path.join(bin, napi))) {
        for (const cpu of dirs(path.join(bin, napi, os))) {
          if (os !== process.platform || cpu !== process.arch) remove(path.join(bin, napi, os, cpu), `onnxruntime-node ${os}-${cpu}`);
        }
      }
    }
  }
  const llama = packageDir('node-llama-cpp');
  if (llama) {
    remove(path.join(llama, 'llama', 'gitRelease.bundle'), "node-llama-cpp's llama.cpp sources");
    // @node-llama-cpp/<mac|linux|win>-<cpu>[-gpu]: its `bins` are that platform's prebuilt llama.cpp.
    const os = { darwin: 'mac', linux: 'linux', win32: 'win' }[process.platform];
    const cpu = { arm: 'armv7l' }[process.arch] ?? process.arch;
    const scope = path.join(path.dirname(llama), '@node-llama-cpp');
    for (const name of dirs(scope)) {
      const [pOs, pCpu] = name.split('-');
      if (pOs !== os || pCpu !== cpu) remove(path.join(scope, name, 'bins'), `@node-llama-cpp/${name}`);
    }
  }
  if (removed.length) console.log(`llmc: removed native builds this ${process.platform}-${process.arch} machine does not load: ${removed.join(', ')} (LLMC_KEEP_PLATFORMS=1 keeps them)`);
}

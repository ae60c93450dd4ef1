/**
 * tfjs setup for the autodiff lowering: wasm backend (wasm files from node_modules),
 * @tensorflow/tfjs-node only if it is already installed (never required), tfjs-core's cpu backend
 * as the fallback.
 *
 * tfjs-core's Node bundle carries no gradient definitions; they ship only as extensionless ESM
 * (`dist/gradients/*`), which Node's resolver rejects. A resolve hook scoped to tfjs-core's dist/
 * adds the `.js`; the gradients register into tfjs's global registry, shared with the bundle.
 */
import { createRequire, register } from 'node:module';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';

export { tf };

const RESOLVE_HOOK = `
export async function resolve(spec, ctx, next) {
  if ((spec.startsWith('./') || spec.startsWith('../')) && !spec.endsWith('.js') &&
      ctx.parentURL && ctx.parentURL.includes('/@tensorflow/tfjs-core/dist/')) {
    try { return await next(spec + '.js', ctx); } catch { return next(spec + '/index.js', ctx); }
  }
  return next(spec, ctx);
}`;

let ready: Promise<{ backend: string; note?: string }> | undefined;

async function registerGradients(): Promise<void> {
  register('data:text/javascript,' + encodeURIComponent(RESOLVE_HOOK));
  await import('@tensorflow/tfjs-core/dist/register_all_gradients.js' as string);
}

/** Initialize once; resolves to the backend in use (and a note when it had to fall back). */
export function initTf(): Promise<{ backend: string; note?: string }> {
  ready ??= (async () => {
    const require = createRequire(import.meta.url);
    tf.env().set('PROD', true);
    await registerGradients();
    // Optional: the native binding is much faster, but we never install or require it.
    try {
      require.resolve('@tensorflow/tfjs-node');
      await import('@tensorflow/tfjs-node' as string);
      if (await tf.setBackend('tensorflow')) return { backend: 'tensorflow' };
    } catch {
      /* not installed: fine */
    }
    let wasmError = '';
    try {
      const wasm = await import('@tensorflow/tfjs-backend-wasm');
      const dist = path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm'));
      wasm.setWasmPaths(dist + path.sep);
      if (await tf.setBackend('wasm')) {
        await tf.ready();
        return { backend: 'wasm' };
      }
      wasmError = 'setBackend returned false';
    } catch (err) {
      wasmError = (err as Error).message.split('\n')[0];
    }
    await import('@tensorflow/tfjs-backend-cpu');
    await tf.setBackend('cpu');
    await tf.ready();
    return { backend: 'cpu', note: `tfjs wasm backend unavailable (${wasmError}); using the slower cpu backend` };
  })();
  return ready;
}

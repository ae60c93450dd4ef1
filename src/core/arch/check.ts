/**
 * An ArchSpec read back from an artifact's manifest (untrusted): every field checked, so a damaged
 * manifest is one error naming the field instead of a crash or a wrong model. Browser-safe.
 */
import type { Checker } from '../util/check.js';
import { isModelType, SUPPORTED_MODEL_TYPES } from './registry.js';
import type { ArchSpec } from './types.js';
import { summarize } from '../errors.js';

const ROPE = ['linear', 'dynamic', 'yarn', 'longrope', 'llama3'];

export function checkArchSpec(v: unknown, c: Checker, at = 'arch'): ArchSpec {
  const a = c.obj(v, at);
  if (!isModelType(a.modelType)) c.fail(`${at}.modelType`, `must be one of ${SUPPORTED_MODEL_TYPES.join(', ')}, got ${summarize(a.modelType)}`);
  const size = (k: string) => {
    const n = c.int(a[k], `${at}.${k}`, 1);
    if (n > 2 ** 31 - 1) c.fail(`${at}.${k}`, `must be below 2^31, got ${n}`);
    return n;
  };
  for (const k of ['hiddenSize', 'intermediateSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'vocabSize', 'maxPositions']) size(k);
  if ((a.numHeads as number) % (a.numKvHeads as number) !== 0) c.fail(`${at}.numHeads`, 'must be a multiple of numKvHeads');
  if ((a.headDim as number) % 2 !== 0) c.fail(`${at}.headDim`, 'must be even (rotary pairs)');
  if (!(c.num(a.rmsNormEps, `${at}.rmsNormEps`) > 0)) c.fail(`${at}.rmsNormEps`, 'must be positive');
  if (!(c.num(a.ropeTheta, `${at}.ropeTheta`) > 0)) c.fail(`${at}.ropeTheta`, 'must be positive');
  if (a.ropeScaling !== null) {
    const at2 = `${at}.ropeScaling`;
    const r = c.obj(a.ropeScaling, at2);
    if (!ROPE.includes(r.type as string)) c.fail(`${at2}.type`, `must be one of ${ROPE.join(', ')}`);
    const pos = (k: string) => {
      if (!(c.num(r[k], `${at2}.${k}`) > 0)) c.fail(`${at2}.${k}`, 'must be positive');
    };
    if (r.type !== 'longrope') pos('factor');
    if (r.type === 'llama3') ['lowFreqFactor', 'highFreqFactor', 'originalMaxPositions'].forEach(pos);
    if (r.type === 'yarn') {
      ['originalMaxPositions', 'betaFast', 'betaSlow', 'attentionFactor'].forEach(pos);
      if (typeof r.truncate !== 'boolean') c.fail(`${at2}.truncate`, 'must be true or false');
    }
    if (r.type === 'longrope') {
      ['originalMaxPositions', 'attentionFactor'].forEach(pos);
      for (const k of ['shortFactor', 'longFactor']) {
        const v = r[k];
        if (!Array.isArray(v) || v.length !== (a.headDim as number) / 2 || !v.every((x) => typeof x === 'number' && x > 0)) c.fail(`${at2}.${k}`, 'must be headDim/2 positive numbers');
      }
    }
  }
  for (const k of ['tieEmbeddings', 'qkvBias', 'oBias', 'mlpBias']) if (typeof a[k] !== 'boolean') c.fail(`${at}.${k}`, 'must be true or false');
  if (a.hiddenAct !== 'silu' && a.hiddenAct !== 'gelu_tanh') c.fail(`${at}.hiddenAct`, 'must be "silu" or "gelu_tanh"');
  // Manifests written before gemma's features: llama's.
  if (a.rmsNormOffset === undefined) a.rmsNormOffset = 0;
  if (a.attnSoftcap === undefined) a.attnSoftcap = null;
  if (a.finalSoftcap === undefined) a.finalSoftcap = null;
  if (a.localRope === undefined) a.localRope = null;
  if (a.rmsNormOffset !== 0 && a.rmsNormOffset !== 1) c.fail(`${at}.rmsNormOffset`, 'must be 0 or 1');
  for (const k of ['attnSoftcap', 'finalSoftcap']) {
    if (a[k] !== null && !(c.num(a[k], `${at}.${k}`) > 0)) c.fail(`${at}.${k}`, 'must be positive or null');
  }
  if (a.localRope !== null) {
    const r = c.obj(a.localRope, `${at}.localRope`);
    if (!(c.num(r.theta, `${at}.localRope.theta`) > 0)) c.fail(`${at}.localRope.theta`, 'must be positive');
    if (r.scaling !== null) c.fail(`${at}.localRope.scaling`, 'must be null (the sliding layers of gemma3 rotate without scaling)');
  }
  if (a.slidingWindow !== null) c.int(a.slidingWindow, `${at}.slidingWindow`, 1);
  // Manifests written before per-layer windows: every layer slides.
  if (a.slidingLayers === undefined) a.slidingLayers = null;
  if (a.slidingLayers !== null) {
    if (a.slidingWindow === null) c.fail(`${at}.slidingLayers`, 'must be null without slidingWindow');
    for (const l of c.ints(a.slidingLayers, `${at}.slidingLayers`)) if (l < 0 || l >= (a.numLayers as number)) c.fail(`${at}.slidingLayers`, 'must name layers of the model');
  }
  if (a.bosTokenId !== null) c.int(a.bosTokenId, `${at}.bosTokenId`);
  c.ints(a.eosTokenIds, `${at}.eosTokenIds`);
  if (a.torchDtype !== null) c.str(a.torchDtype, `${at}.torchDtype`);
  if (a.moe !== null) {
    const m = c.obj(a.moe, `${at}.moe`);
    if (m.routing !== 'softmax-topk-renorm' && m.routing !== 'softmax-topk') c.fail(`${at}.moe.routing`, 'must be softmax-topk-renorm or softmax-topk');
    const E = c.int(m.numExperts, `${at}.moe.numExperts`, 1);
    if (c.int(m.topK, `${at}.moe.topK`, 1) > E) c.fail(`${at}.moe.topK`, 'exceeds numExperts');
    c.int(m.expertIntermediateSize, `${at}.moe.expertIntermediateSize`, 1);
    if (m.sharedExpertIntermediateSize !== null) c.int(m.sharedExpertIntermediateSize, `${at}.moe.sharedExpertIntermediateSize`, 1);
    c.ints(m.denseLayers, `${at}.moe.denseLayers`);
  }
  // Manifests written before these families: Llama's layer.
  if (a.qkNorm === undefined) a.qkNorm = null;
  if (a.normPlacement === undefined) a.normPlacement = 'pre';
  if (a.ropeLayers === undefined) a.ropeLayers = null;
  if (a.multipliers === undefined) a.multipliers = null;
  if (a.qkNorm !== null) {
    const q = c.obj(a.qkNorm, `${at}.qkNorm`);
    if (q.scope !== 'head' && q.scope !== 'all') c.fail(`${at}.qkNorm.scope`, 'must be "head" or "all"');
    if (q.offset !== 0 && q.offset !== 1) c.fail(`${at}.qkNorm.offset`, 'must be 0 or 1');
  }
  if (!['pre', 'post', 'sandwich'].includes(a.normPlacement as string)) c.fail(`${at}.normPlacement`, 'must be pre, post or sandwich');
  if (a.ropeLayers !== null) for (const l of c.ints(a.ropeLayers, `${at}.ropeLayers`)) if (l < 0 || l >= (a.numLayers as number)) c.fail(`${at}.ropeLayers`, 'must name layers of the model');
  if (a.multipliers !== null) {
    const m = c.obj(a.multipliers, `${at}.multipliers`);
    for (const k of ['embedding', 'residual', 'logitsDivide']) if (!Number.isFinite(c.num(m[k], `${at}.multipliers.${k}`))) c.fail(`${at}.multipliers.${k}`, 'must be finite');
    if (m.attention !== null && !(c.num(m.attention, `${at}.multipliers.attention`) > 0)) c.fail(`${at}.multipliers.attention`, 'must be positive or null');
    if (m.logitsDivide === 0) c.fail(`${at}.multipliers.logitsDivide`, 'must not be 0');
  }
  return a as unknown as ArchSpec;
}

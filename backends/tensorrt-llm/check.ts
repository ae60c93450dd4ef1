/**
 * What a TensorRT-LLM class cannot express of a model: the layer features beyond Llama's its
 * registry entry does not declare (TrtllmFamily.layer), then the entry's own refusal. Checked by
 * the descriptor before any work and by emit. Rope types are emit's rotaryScaling's to refuse.
 */
import type { ArchSpec } from '../../src/core/arch/spec.js';
import type { TrtllmFamily } from '../../src/core/arch/registry.js';

export function trtllmRefusal(s: ArchSpec, cls: TrtllmFamily): string | null {
  const has = (f: NonNullable<TrtllmFamily['layer']>[number]) => (cls.layer ?? []).includes(f);
  const gemma = has('gemma');
  const missing: string[] = [];
  if (s.qkNorm && !(has('qk-norm') && s.qkNorm.scope === 'head' && s.qkNorm.offset === (cls.normPlusOne ? 1 : 0))) missing.push(s.qkNorm.scope === 'head' ? 'per-head q/k RMSNorm' : 'q/k RMSNorm over the whole projection');
  if (s.normPlacement !== (gemma ? 'sandwich' : 'pre')) missing.push(s.normPlacement === 'post' ? 'norms after the attention and MLP blocks' : 'sandwich norms');
  if (s.ropeLayers) missing.push('layers without rope');
  if (s.multipliers && !gemma && !has('multipliers')) missing.push('embedding / residual / attention / logit multipliers');
  if (s.hiddenAct !== (gemma ? 'gelu_tanh' : 'silu')) missing.push(s.hiddenAct === 'gelu_tanh' ? 'GELU-tanh MLP' : 'SiLU MLP');
  if (s.rmsNormOffset !== (gemma ? 1 : 0)) missing.push(s.rmsNormOffset ? '(1 + w) RMSNorm' : 'plain RMSNorm');
  if (s.attnSoftcap !== null && !gemma) missing.push('attention soft-capping');
  if (s.finalSoftcap !== null && !gemma) missing.push('final logit soft-capping');
  if (s.localRope && !(gemma && has('qk-norm'))) missing.push('a rotary base of its own on the sliding layers');
  if (s.oBias) missing.push('an o_proj bias (attention.dense.bias)');
  if (missing.length) return `TensorRT-LLM's ${cls.architecture} class computes no ${missing.join(', ')}`;
  return cls.refuse?.(s) ?? null;
}

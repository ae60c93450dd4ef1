/**
 * The WebAssembly instructions llmc's hand-assembled kernels are written in (src/core/quant's K-quant and
 * half-float kernels), as byte arrays to spread into a function body. Names: scalar ops spell their
 * type (i32Add, f32Mul); vector ops a lane prefix: f = f32x4, i = i32x4, h = i16x8, b = i8x16,
 * v = the whole v128. Pure and browser-safe, like wasm-asm.ts.
 */
import { sleb, uleb } from './wasm-asm.js';

export const get = (i: number) => [0x20, ...uleb(i)];
export const set = (i: number) => [0x21, ...uleb(i)];
export const tee = (i: number) => [0x22, ...uleb(i)];
export const i32c = (v: number) => [0x41, ...sleb(v)];
export const f32c = (v: number) => [0x43, ...new Uint8Array(new Float32Array([v]).buffer)];
export const loop = (body: number[]) => [0x03, 0x40, ...body, 0x0b];
export const ifThen = (body: number[]) => [0x04, 0x40, ...body, 0x0b];
/** if (i32 on the stack) then `a` else `b`, each leaving one value of type `type`. */
export const ifElse = (type: number, a: number[], b: number[]) => [0x04, type, ...a, 0x05, ...b, 0x0b];
export const brIf = (d: number) => [0x0d, ...uleb(d)];

// scalar
export const i32Add = [0x6a];
export const i32Mul = [0x6c];
export const i32LtS = [0x48];
export const i32LeS = [0x4c];
export const i32And = [0x71];
export const i32Or = [0x72];
export const i32Shl = [0x74];
export const f32Add = [0x92];
export const f32Mul = [0x94];
export const f32FromI32 = [0xb2];

// SIMD (0xfd prefix); loads and stores take no alignment hint (V8 ignores it; inputs may be unaligned)
export const simd = (code: number, ...imm: number[]) => [0xfd, ...uleb(code), ...imm];
export const vload = (off = 0) => simd(0x00, 0, ...uleb(off));
export const vstore = (off = 0) => simd(0x0b, 0, ...uleb(off));
export const vZero = simd(0x0c, ...new Array(16).fill(0));
export const bSplat = simd(0x0f);
export const hSplat = simd(0x10);
export const iSplat = simd(0x11);
export const fSplat = simd(0x13);
export const iEq = simd(0x37);
export const iGeS = simd(0x3f);
export const hGeU = simd(0x36);
export const fEq = simd(0x41);
export const fLt = simd(0x43);
export const fGt = simd(0x44);
export const fGe = simd(0x46);
export const vAnd = simd(0x4e);
export const vOr = simd(0x50);
export const vXor = simd(0x51);
export const vBitselect = simd(0x52);
export const vAnyTrue = simd(0x53);
export const bBitmask = simd(0x64);
export const bNarrowS = simd(0x65);
export const bNarrowU = simd(0x66); // i8x16.narrow_i16x8_u
export const fTrunc = simd(0x69);
export const fNearest = simd(0x6a);
export const bShl = simd(0x6b);
export const hAllTrue = simd(0x83);
export const hNarrowS = simd(0x85);
export const hNarrowU = simd(0x86); // i16x8.narrow_i32x4_u
export const hShl = simd(0x8b);
export const hShrS = simd(0x8c);
export const hSub = simd(0x91);
export const hMaxU = simd(0x99);
export const iBitmask = simd(0xa4);
export const iExtLowU = simd(0xa9); // i32x4.extend_low_i16x8_u
export const iExtHighU = simd(0xaa);
export const iShl = simd(0xab);
export const iShrS = simd(0xac);
export const iAdd = simd(0xae);
export const iSub = simd(0xb1);
export const iMinS = simd(0xb6);
export const iMaxS = simd(0xb8);
export const fAbs = simd(0xe0);
export const fNeg = simd(0xe1);
export const fAdd = simd(0xe4);
export const fSub = simd(0xe5);
export const fMul = simd(0xe6);
export const fDiv = simd(0xe7);
export const iTruncSat = simd(0xf8); // i32x4.trunc_sat_f32x4_s
export const fFromI32 = simd(0xfa);

// added for the runtime's attention kernel
export const block = (body: number[]) => [0x02, 0x40, ...body, 0x0b];
export const br = (d: number) => [0x0c, ...uleb(d)];
export const select = [0x1b];
export const i32Sub = [0x6b];
export const i32GeS = [0x4e];
export const i32GeU = [0x4f];
export const i32Load = (off = 0) => [0x28, 2, ...uleb(off)];
export const f32Load = (off = 0) => [0x2a, 2, ...uleb(off)];
export const f32Max = [0x97];
export const f32Div = [0x95];
/** i8x16.shuffle of the 32 bytes of two v128: `lanes` are four f32 lanes (0..3 first operand, 4..7 second). */
export const fShuffle = (lanes: [number, number, number, number]) => simd(0x0d, ...lanes.flatMap((l) => [4 * l, 4 * l + 1, 4 * l + 2, 4 * l + 3]));
export const fExtract = (lane: number) => simd(0x1f, lane);
export const iLtS = simd(0x39);
export const fMax = simd(0xe9);
/** A v128 constant from four i32 lanes. */
export const iConst = (a: [number, number, number, number]) => simd(0x0c, ...new Uint8Array(new Int32Array(a).buffer));

// Scalar f32 compares and arithmetic, bit casts, stores.
export const f32Min = [0x96];
export const f32Eq = [0x5b];
export const f32Ne = [0x5c];
export const f32Lt = [0x5d];
export const f32Gt = [0x5e];
export const f32Ge = [0x60];
export const f32Neg = [0x8c];
export const f32Sub = [0x93];
export const i32ShrU = [0x76];
export const i32Reinterpret = [0xbc]; // i32.reinterpret_f32
export const f32Reinterpret = [0xbe]; // f32.reinterpret_i32
export const f32Store = (off = 0) => [0x38, 2, ...uleb(off)];
export const i32Store16 = (off = 0) => [0x3b, 1, ...uleb(off)];
// More v128 lanes.
export const iExtract = (lane: number) => simd(0x1b, lane);
export const fPmin = simd(0xea);
export const fPmax = simd(0xeb);
export const hPairs = simd(0x7c); // i16x8.extadd_pairwise_i8x16_s
export const iPairs = simd(0x7e); // i32x4.extadd_pairwise_i16x8_s

// Relaxed SIMD (validates only where ../../exec/runtime/relaxed.ts says so).
/** i16x8.relaxed_dot_i8x16_i7x16_s(a, b): Σ of 2 products a·b per i16 lane (x86's pmaddubsw); exact while b's bytes are in 0..127. */
export const hRelaxedDot = simd(0x112);

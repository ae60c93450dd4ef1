/**
 * ONNX protobuf messages from onnx-proto, plus the few raw protobuf helpers needed to splice
 * large float initializers into an encoded model without building them as JS objects.
 */
import onnxProto from 'onnx-proto';

export const onnx = onnxProto.onnx;
export type NodeProto = onnxProto.onnx.INodeProto;
export type TensorProto = onnxProto.onnx.ITensorProto;
export type AttributeProto = onnxProto.onnx.IAttributeProto;
export type ValueInfoProto = onnxProto.onnx.IValueInfoProto;
export type ModelProto = onnxProto.onnx.IModelProto;
export type GraphProto = onnxProto.onnx.IGraphProto;

export const DT_FLOAT = onnx.TensorProto.DataType.FLOAT;
export const DT_INT64 = onnx.TensorProto.DataType.INT64;
export const DT_FLOAT16 = onnx.TensorProto.DataType.FLOAT16;
export const DT_INT8 = onnx.TensorProto.DataType.INT8;
export const DT_UINT8 = onnx.TensorProto.DataType.UINT8;
export const DT_BOOL = onnx.TensorProto.DataType.BOOL;
/** IR 10 (opset 21) types onnx-proto's enum predates. */
export const DT_UINT4 = 21;
export const DT_INT4 = 22;

/** Bytes of a protobuf varint. */
export function varint(n: number): Uint8Array {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
  return Uint8Array.from(out);
}

/** Key byte(s) of a length-delimited field. */
export function lenKey(field: number): Uint8Array {
  return varint((field << 3) | 2);
}

export function attr(name: string, value: number | number[] | string, kind: 'int' | 'float' | 'ints' | 'string' = 'int'): AttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (kind === 'float') return { name, type: T.FLOAT, f: value as number };
  if (kind === 'ints') return { name, type: T.INTS, ints: value as number[] };
  if (kind === 'string') return { name, type: T.STRING, s: new TextEncoder().encode(value as string) };
  return { name, type: T.INT, i: value as number };
}

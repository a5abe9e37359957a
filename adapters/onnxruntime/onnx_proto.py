"""The few ONNX protobuf messages a one-node model needs, encoded by hand.

Written when kvfuzz started one engine process per case, where importing the `onnx`
package (about 0.6 s, it pulls in ml_dtypes) would have been most of a check's time. That
reason is gone: a version-2 exec engine now lives as long as its worker (docs/
engine-protocol.md), so the import would cost 0.6 s per worker, and `onnx.helper` is the
well-kept tool for these messages; moving to it (pinned in scripts/python-requirements.txt)
is still to do. Field numbers are those of onnx/onnx.proto (ModelProto, GraphProto,
NodeProto, AttributeProto, ValueInfoProto, TypeProto.Tensor, TensorShapeProto); ORT parses
the bytes as it would any model file.
"""

import struct

# TensorProto.DataType
FLOAT = 1
INT32 = 6
INT64 = 7
BOOL = 9
FLOAT16 = 10

_ATTRIBUTE_FLOAT = 1  # AttributeProto.AttributeType
_ATTRIBUTE_INT = 2


def _varint(n):
    n &= (1 << 64) - 1  # negative int64 values are ten bytes of two's complement
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field, wire_type):
    return _varint(field << 3 | wire_type)


def _int(field, n):
    return _key(field, 0) + _varint(n)


def _bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return _key(field, 2) + _varint(len(data)) + data


def _float(field, x):
    return _key(field, 5) + struct.pack("<f", x)


def attribute(name, value):
    """AttributeProto: an int (bools too) or a float."""
    if isinstance(value, float):
        return _bytes(1, name) + _float(2, value) + _int(20, _ATTRIBUTE_FLOAT)
    return _bytes(1, name) + _int(3, int(value)) + _int(20, _ATTRIBUTE_INT)


def node(op_type, inputs, outputs, domain, attributes):
    """NodeProto; attributes is a dict of names to ints or floats."""
    fields = [_bytes(1, i) for i in inputs] + [_bytes(2, o) for o in outputs]
    fields += [_bytes(4, op_type), _bytes(7, domain)]
    fields += [_bytes(5, attribute(k, v)) for k, v in attributes.items()]
    return b"".join(fields)


def value_info(name, elem_type, shape):
    """ValueInfoProto of a tensor; shape entries are ints or symbolic names."""
    dims = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _bytes(2, d)) for d in shape)
    tensor = _int(1, elem_type) + _bytes(2, dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor))


def model(node_bytes, inputs, outputs, opsets, ir_version=10):
    """ModelProto of a graph with one node; opsets is a dict of domains to versions."""
    graph = _bytes(1, node_bytes) + _bytes(2, "kvfuzz")
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    opset_ids = b"".join(_bytes(8, _bytes(1, d) + _int(2, v)) for d, v in opsets.items())
    return _int(1, ir_version) + opset_ids + _bytes(7, graph)

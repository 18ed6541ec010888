"""The op tables the input walk reads: ops passing values on, reading tables, parsing strings, deciding control flow."""

from msopt.graph.op_tables import CALL_OPS

# Ops whose output 0 carries the values of their input 0 (or of every data input for the n-ary ones).
# fmt: off
PASS_FIRST = {
    "Identity", "Cast", "Reshape", "ExpandDims", "Squeeze", "StridedSlice", "Slice", "Transpose", "Tile",
    "StopGradient", "Snapshot", "PreventGradient", "Enter", "RefEnter", "Exit", "RefExit", "NextIteration",
    "RefIdentity", "CheckNumerics", "EnsureShape", "PlaceholderWithDefault", "BroadcastTo", "ReverseV2",
    "Unique", "UniqueV2", "UniqueWithCounts", "GatherV2", "Gather", "GatherNd", "Bitcast", "StringToNumber",
    "Max",  # an assertion on max(ids) bounds every id
}
PASS_ANY = {"Pack", "ConcatV2", "Concat", "Merge", "RefMerge", "AddN", "StringJoin"}
PASS_ALL_OUTPUTS = {"Unpack", "Split", "SplitV", "Switch", "RefSwitch"}
CALLS = CALL_OPS
BRANCHES = {"If", "StatelessIf"}
LOOPS = {"While", "StatelessWhile"}
# Ops reading a table at the ids of input 1: (table input, dimension attr giving the row axis).
GATHERS = {"GatherV2": 0, "Gather": 0, "ResourceGather": 0, "SparseSegmentSum": 0, "SparseSegmentMean": 0,
           "SparseSegmentSqrtN": 0, "SparseSegmentSumWithNumSegments": 0, "SparseSegmentMeanWithNumSegments": 0,
           "SparseSegmentSqrtNWithNumSegments": 0}
HASHES = {"StringToHashBucket", "StringToHashBucketFast", "StringToHashBucketStrong", "LookupTableFind",
          "LookupTableFindV2", "StringLength", "StringLower", "StringUpper", "StringStrip", "Substr",
          "StaticRegexReplace", "RegexReplace", "StaticRegexFullMatch", "RegexFullMatch", "ReduceJoin", "Equal", "NotEqual", "UnicodeDecode", "UnicodeDecodeWithOffsets", "StringNGrams"}
# Parsers whose input format msopt does not generate: such an input must come from --inputs.
OPAQUE = {"DecodeJpeg", "DecodePng", "DecodeImage", "DecodeGif", "DecodeBmp", "DecodeAndCropJpeg", "DecodeRaw",
          "DecodeWav", "DecodeBase64", "DecodeCompressed", "DecodeProtoV2", "DecodeJSONExample",
          "ParseSequenceExample", "ParseSequenceExampleV2",
          "ParseSingleSequenceExample", "ParseTensor", "DeserializeSparse", "DeserializeManySparse"}
# Ops whose output has their input 0's shape: an input of unknown rank takes the shape a consumer past them needs.
SAME_SHAPE = {"Identity", "Cast", "StopGradient", "Snapshot", "Enter", "Exit", "NextIteration", "Merge", "Switch",
              "PlaceholderWithDefault", "CheckNumerics", "Relu", "Relu6", "Elu", "Selu", "Tanh", "Sigmoid", "Neg",
              "Abs", "Exp", "Log", "Square", "Sqrt", "Floor", "Round", "Sign", "LogicalNot"}
PREDICATES = {("Switch", 1), ("RefSwitch", 1), ("If", 0), ("StatelessIf", 0), ("Assert", 0), ("LoopCond", 0)}
# fmt: on

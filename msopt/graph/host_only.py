"""Which ops keep their device: no GPU kernel in stock TensorFlow, or string data (no stream for them)."""

DT_STRING = 7

# Ops that have no GPU kernel in stock TensorFlow (or keep their outputs in host memory).
# This list is maintained by hand: a CPU-only TensorFlow registers no GPU kernels, so
# msopt cannot ask. Any op whose type or dtype attributes say "string" is host-only too.
# fmt: off
HOST_ONLY_OPS = frozenset({
    # checkpoints and files
    "SaveV2", "Save", "SaveSlices", "RestoreV2", "Restore", "RestoreSlice", "MergeV2Checkpoints",
    "ShardedFilename", "ShardedFilespec", "ReadFile", "WriteFile", "MatchingFiles",
    # string processing and parsing
    "StaticRegexFullMatch", "StaticRegexReplace", "RegexFullMatch", "RegexReplace", "Substr",
    "DecodeCSV", "DecodeRaw", "DecodeJSONExample", "ParseExample", "ParseExampleV2", "ParseSingleExample",
    "ParseSequenceExample", "ParseSequenceExampleV2", "ParseSingleSequenceExample", "ParseTensor",
    "SerializeTensor", "EncodeBase64", "DecodeBase64", "AsString", "ReduceJoin", "UnicodeDecode",
    "UnicodeDecodeWithOffsets", "UnicodeEncode", "UnicodeScript", "UnicodeTranscode",
    # hashing of strings into buckets
    "StringToHashBucket", "StringToHashBucketFast", "StringToHashBucketStrong",
    # lookup tables
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2",
    "AnonymousHashTable", "AnonymousMutableHashTable", "AnonymousMutableHashTableOfTensors",
    "AnonymousMutableDenseHashTable", "LookupTableFind", "LookupTableFindV2", "LookupTableInsert",
    "LookupTableInsertV2", "LookupTableImport", "LookupTableImportV2", "LookupTableExport",
    "LookupTableExportV2", "LookupTableSize", "LookupTableSizeV2", "LookupTableRemoveV2",
    "InitializeTable", "InitializeTableV2", "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
    "InitializeTableFromDataset",
    # ragged and sparse helpers without GPU kernels
    "RaggedTensorToTensor", "RaggedTensorToSparse", "RaggedTensorFromVariant", "RaggedTensorToVariant",
    "DenseBincount", "Bincount", "SparseSegmentSumWithNumSegments",
    # summaries, printing, input pipelines
    "Print", "PrintV2", "Assert", "ScalarSummary", "HistogramSummary", "ImageSummary", "MergeSummary",
    "IteratorV2", "IteratorGetNext", "MakeIterator", "OneShotIterator",
})
STRING_ATTRS = frozenset({"T", "dtype", "out_type", "Tout", "DstT", "SrcT"})
# fmt: on


def host_only(view):
    """Keys of the nodes that must keep their device: no GPU kernel (one test per op type), or string-typed (the
    view's attribute notes, GraphView.attribute_notes)."""
    return {node.key for node in view.of_ops(is_host_op)} | view.attribute_notes()[0]


def is_host_op(op):
    """An op type without a GPU kernel in stock TensorFlow, whatever its attributes."""
    return op in HOST_ONLY_OPS or "String" in op


def says_string(value, kind):
    """Whether an AttrValue of ``kind`` (its WhichOneof) is the string type or a list holding it (reading .list of
    another kind would build an empty one)."""
    return (kind == "type" and value.type == DT_STRING) or (kind == "list" and DT_STRING in value.list.type)

# The mesh tests, one program each (tests/mesh/<name>.cc): tests/mesh builds them over the
# in-process transport, tests/tsan again with ThreadSanitizer.
set(MERIDIAN_MESH_TESTS determinism_test diloco_overlap_test diloco_sparse_test
  diloco_streaming_test diloco_test elastic_data_test fault_matrix_test live_recovery_test memory_store_test
  outer_optimizer_test process_probe_test ring_order_test round_record_test store_size_test)

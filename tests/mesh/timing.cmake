# The mesh tests whose outcome depends on thread scheduling, as ctest label `timing` (README
# "Tests"): those that run whole nodes as threads on tests/mesh/cluster_harness.h with sub-second
# liveness leases (heartbeat 0.1 s, dead after 0.3 s). A node thread starved that long on an
# overloaded machine looks dead to its peers. `timing_<file>` is the gtest filter of the file's
# timing tests; tests/mesh labels those, tests/tsan the whole ThreadSanitizer build of the file
# (it runs as one test). Determinism is not among them: it runs with a 2 s lease and a 20 s ring
# timeout, and its churn is scripted on the nodes' own activity (tests/mesh/determinism_test.cc).
set(timing_diloco_test "Diloco.*")
set(timing_diloco_overlap_test "Diloco/OverlapTest.*")
set(timing_diloco_streaming_test "Diloco/StreamingTest.*")
set(timing_diloco_sparse_test "Diloco/SparseTest.*")
set(timing_elastic_data_test "ElasticDataTest.*")
set(timing_fault_matrix_test "FaultMatrix.*")
set(timing_store_size_test "StoreSize.*")
